#!/bin/sh
# On one H200 (27 s): ../overlap-sm-h200-2026-12-02/overlap_sm.cu at one and two SMs, for the
# GEMMs of Transformer Engine's `ring_exchange` reduce-scatter overlap (num_sm 1,
# set_sm_margin: the GEMM planned for the SMs less one, the partial sums sent by copy
# engine): the 70B and 405B layers' forward GEMMs at TP 8, in FP8 and in BF16.
set -e
cd "$(dirname "$0")"
nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -o "$OUT/overlap_sm" ../overlap-sm-h200-2026-12-02/overlap_sm.cu -lcublasLt
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv
"$OUT/overlap_sm" 70b fp8 1,2 | tee "$OUT/margin_70b_fp8.csv"
"$OUT/overlap_sm" 405b fp8 1,2 | tee "$OUT/margin_405b_fp8.csv"
"$OUT/overlap_sm" 70b bf16 1,2 | tee "$OUT/margin_70b_bf16.csv"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv
rm -f "$OUT/overlap_sm"
