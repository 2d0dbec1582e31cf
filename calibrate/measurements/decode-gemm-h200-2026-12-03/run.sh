#!/bin/bash
# On one H200 (device tool): python3 decode_gemm.py > $OUT/decode_gemm.jsonl
set -e
cd "$(dirname "$0")"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "${OUT:-.}/env.txt"
python3 decode_gemm.py | tee "${OUT:-.}/decode_gemm.jsonl"
