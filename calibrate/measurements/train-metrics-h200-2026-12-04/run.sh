#!/bin/bash
# Composer's training-metric update on one GPU (metrics.py says what runs).
set -u
cd "$(dirname "$0")"
O=${OUT:-/tmp/out}; mkdir -p "$O"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee "$O/gpu.txt"
PYTHONUNBUFFERED=1 python3 metrics.py 2>&1 | tee "$O/metrics.jsonl"
