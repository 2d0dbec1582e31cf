#!/bin/bash
# The host side of torchmetrics' per-state sync on one GPU (metric_sync.py says what runs).
set -u
cd "$(dirname "$0")"
O=${OUT:-/tmp/out}; mkdir -p "$O"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee "$O/gpu.txt"
lscpu | grep -E "Model name|^CPU\(s\)" | tee "$O/cpu.txt"
PYTHONUNBUFFERED=1 python3 metric_sync.py 2>&1 | tee "$O/metric_sync.jsonl"
