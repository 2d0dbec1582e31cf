#!/bin/bash
# MPT's unpad / pad around FlashAttention in an eager step, on one H200 (unpad.py says what runs).
set -u
cd "$(dirname "$0")"
O=${OUT:-/tmp/out}; mkdir -p "$O"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee "$O/gpu.txt"
PYTHONUNBUFFERED=1 python3 unpad.py "$O" 2>&1 | tee "$O/unpad.jsonl" | tail -40
PYTHONUNBUFFERED=1 python3 parts.py 2>&1 | tee "$O/parts.jsonl"
