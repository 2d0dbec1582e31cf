#!/bin/bash
# The second call on the same day: the rotary chains' kernel times alone (rope_kernels.py).
cd "$(dirname "$0")/../../.."
PYTHONUNBUFFERED=1 python3 calibrate/measurements/rope-h200-2026-12-03/rope_kernels.py > ${OUT:-/tmp}/rope_kernels.jsonl
