#!/bin/sh
# One device call: builds and runs overlap_sm.cu; the table goes to $OUT/overlap_sm.csv.
set -e
cd "$(dirname "$0")"
nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -o "$OUT/overlap_sm" overlap_sm.cu -lcublasLt
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv
"$OUT/overlap_sm" | tee "$OUT/overlap_sm.csv"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv
rm -f "$OUT/overlap_sm"
