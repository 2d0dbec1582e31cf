#!/bin/sh
# On one H200 (3 s): builds and runs kv_reread.cu; results in $OUT.
set -e
cd "$(dirname "$0")"
nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -o "$OUT/kv_reread" kv_reread.cu
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
"$OUT/kv_reread" | tee "$OUT/kv_reread.csv"
rm -f "$OUT/kv_reread"
