#!/bin/bash
# On one H100 SXM: the README 1.7B step's kinds of kernel, each back to back at its own shape (power_parts.py),
# with nvidia-smi sampling every 100 ms; summary.py takes the medians over each case's last 6 s.
set -u
cd "$(dirname "$0")"
O=${OUT:-/tmp/out}; mkdir -p "$O"
nvidia-smi --format=csv --query-gpu=name,driver_version,power.limit,clocks.max.sm,serial > "$O/env.txt" 2>&1
q=timestamp,clocks.sm,power.draw,clocks_event_reasons.active,temperature.gpu
nvidia-smi --query-gpu=$q --format=csv,noheader,nounits -lms 100 > "$O/smi.csv" 2>&1 &
SMI=$!
touch "$O/marks.txt"
sleep 2
PYTHONUNBUFFERED=1 python3 duty_cycle.py "$O" "${1:-first}" 2>&1 | tee "$O/duty_cycle.log"
kill $SMI
