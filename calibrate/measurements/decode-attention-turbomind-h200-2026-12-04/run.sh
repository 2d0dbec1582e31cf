#!/bin/sh
# On one H200 (about 20 s): builds tm_decode.cu against LMDeploy v0.1.0a1's decode-attention
# headers ($LMDEPLOY_SRC: a checkout of InternLM/lmdeploy at v0.1.0a1,
# 9c46b27ce0358b8bc645633442b7810f715997d7) and runs it; results in $OUT.
set -e
cd "$(dirname "$0")"
nvcc -O3 -std=c++17 --expt-relaxed-constexpr -diag-suppress 513 -gencode=arch=compute_90,code=sm_90 -I "$LMDEPLOY_SRC" -o "$OUT/tm_decode" tm_decode.cu
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv
"$OUT/tm_decode" | tee "$OUT/tm_decode.csv"
rm -f "$OUT/tm_decode"
