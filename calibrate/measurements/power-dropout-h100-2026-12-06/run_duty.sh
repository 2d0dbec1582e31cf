#!/bin/bash
# duty_cycle.py under run_parts.sh's sampling: OUT=out-duty ./run_duty.sh [first|second|attention]
exec "$(dirname "$0")/run_parts.sh" duty_cycle.py "${1:-first}"
