#!/bin/bash
# On one H100 SXM, with nvidia-smi sampling every 100 ms: the README 1.7B step's kinds of kernel, each back to back
# at its own shape (power_parts.py, the default), or another program of this folder with its arguments
# (run_duty.sh: duty_cycle.py); summary.py takes the medians over each case's last 6 s.
#   OUT=out-parts ./run_parts.sh        OUT=out-duty ./run_parts.sh duty_cycle.py first
set -u
cd "$(dirname "$0")"
O=${OUT:-/tmp/out}; mkdir -p "$O"
P=${1:-power_parts.py}
nvidia-smi --format=csv --query-gpu=name,driver_version,power.limit,clocks.max.sm,serial > "$O/env.txt" 2>&1
q=timestamp,clocks.sm,power.draw,clocks_event_reasons.active,temperature.gpu
nvidia-smi --query-gpu=$q --format=csv,noheader,nounits -lms 100 > "$O/smi.csv" 2>&1 &
SMI=$!
touch "$O/marks.txt"
sleep 2
PYTHONUNBUFFERED=1 python3 "$P" "$O" "${@:2}" 2>&1 | tee "$O/${P%.py}.log"
kill $SMI
