#!/bin/bash
# An eager GPT layer's step with CUDA_LAUNCH_BLOCKING=0 and =1 (layer.py says what runs).
set -u
cd "$(dirname "$0")"
O=${OUT:-/tmp/out}; mkdir -p "$O"
for b in 0 1 0 1; do CUDA_LAUNCH_BLOCKING=$b PYTHONUNBUFFERED=1 python3 layer.py "$O" "b$b-$RANDOM" 2>&1 | tee -a "$O/layer.log"; done
lscpu | grep -E 'Model name|^CPU\(s\)' >> "$O/layer.log"
