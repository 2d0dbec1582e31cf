#!/bin/sh
# One device call: fused attention beside 1-24 held SMs (attn_beside.csv).
set -e
cd "$(dirname "$0")"
python3 attn_beside.py | tee "$OUT/attn_beside.csv"
