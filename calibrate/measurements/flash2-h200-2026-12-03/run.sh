#!/bin/sh
# One device call: FlashAttention-2 / cuDNN / memory-efficient attention rates (fa2.csv),
# and cuBLASLt GEMMs beside 1, 2 and 4 one-per-SM blocks, as an NCCL send or receive holds
# (overlap_sm_small_k.csv, built from ../overlap-sm-h200-2026-12-02/overlap_sm.cu).
set -e
cd "$(dirname "$0")"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv
python3 fa2.py | tee "$OUT/fa2.csv"
nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -o "$OUT/overlap_sm" ../overlap-sm-h200-2026-12-02/overlap_sm.cu -lcublasLt
"$OUT/overlap_sm" 70b bf16 1,2,4,8 | tee "$OUT/overlap_sm_small_k.csv"
rm -f "$OUT/overlap_sm"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv
