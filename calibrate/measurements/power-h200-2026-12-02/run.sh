#!/bin/bash
# Board power and SM clock per kind of kernel on one H200 under its cap (power.py says what runs).
set -u
cd "$(dirname "$0")"
O=${OUT:-/tmp/out}; mkdir -p "$O"
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader > "$O/env.txt"
python3 power.py "$O" 2>&1 | tail -30
