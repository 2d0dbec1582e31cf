#!/bin/sh
# One device call: builds and runs overlap_sm.cu: the 70B layer's GEMMs in BF16
# (overlap_sm.csv), the 405B layer's (overlap_sm_405b.csv) and the 70B layer's in FP8
# (overlap_sm_70b_fp8.csv).
set -e
cd "$(dirname "$0")"
nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -o "$OUT/overlap_sm" overlap_sm.cu -lcublasLt
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv
"$OUT/overlap_sm" 70b bf16 | tee "$OUT/overlap_sm.csv"
"$OUT/overlap_sm" 405b bf16 | tee "$OUT/overlap_sm_405b.csv"
"$OUT/overlap_sm" 70b fp8 | tee "$OUT/overlap_sm_70b_fp8.csv"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv
rm -f "$OUT/overlap_sm"
