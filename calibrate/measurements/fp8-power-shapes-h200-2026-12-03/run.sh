#!/bin/bash
# FP8 and BF16 GEMMs of Llama 3 layers' shapes under the H200's cap (shapes.py says what runs).
set -u
cd "$(dirname "$0")"
O=${OUT:-/tmp/out}; mkdir -p "$O"
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader > "$O/env.txt"
PYTHONUNBUFFERED=1 python3 shapes.py "$O" 2>&1 | tee "$O/run.log" | tail -40
