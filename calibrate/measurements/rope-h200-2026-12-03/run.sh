#!/bin/bash
# On one H200: the rotary-embedding kernels (rope.py). (The same call then recorded the
# validation scenario with GQA under a first form of the rotary ops; their bytes changed
# after this measurement, and calibrate/measurements/validation/record-llama3-8b.sh
# recorded it again.)
# .device/ holds a stripped build/clustersim-real and the shared libraries the GPU machine lacks.
set -u
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/.device/lib:${LD_LIBRARY_PATH:-}:$PWD/.device/libmpi
export CLUSTERSIM_ATTENTION=own
O=${OUT:-/tmp}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader
PYTHONUNBUFFERED=1 python3 calibrate/measurements/rope-h200-2026-12-03/rope.py > $O/rope.jsonl
