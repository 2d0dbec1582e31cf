#!/bin/sh
# One device call: kernels.py into $OUT/kernels.csv.
set -e
cd "$(dirname "$0")"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > "$OUT/env.txt"
python3 kernels.py | tee "$OUT/kernels.csv"
