#!/bin/sh
# One device call: fused attention's rate over batch x heads (tiles.csv).
set -e
cd "$(dirname "$0")"
python3 tiles.py | tee "$OUT/tiles.csv"
