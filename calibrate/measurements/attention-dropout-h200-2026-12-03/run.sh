#!/bin/bash
# Fused attention with and without dropout on one H200 (dropout.py says what runs).
set -u
cd "$(dirname "$0")"
O=${OUT:-/tmp/out}; mkdir -p "$O"
PYTHONUNBUFFERED=1 python3 dropout.py "$O" 2>&1 | tee "$O/dropout.log" | tail -20
