#!/bin/bash
# On one H200: dropout.py, twice, with the SM clock sampled before and after.
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader
for n in 1 2; do PYTHONUNBUFFERED=1 python3 calibrate/measurements/dropout-h200-2026-12-03/dropout.py > $O/dropout-$n.jsonl; done
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader
cat $O/dropout-*.jsonl
