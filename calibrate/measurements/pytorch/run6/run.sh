#!/bin/bash
# SDPA's attention table timed with the GPU queued behind a spin kernel (each row the kernels'
# own time) and, beside it in the JSON lines, unqueued as run3's table was; then the seven
# one-GPU steps of run5 with one step's kernels profiled (PROFILE=1), to split each step by kind.
#   OUT=run6/<board> ./run6/run.sh      (from calibrate/measurements/pytorch; one H200 or H100)
set -u
cd "$(dirname "$0")/.."
O=${OUT:-/tmp/out}; mkdir -p "$O"
nvidia-smi --format=csv --query-gpu=name,driver_version,power.limit,clocks.max.sm,serial > "$O/env.txt" 2>&1
python3 ../../pytorch_reference.py --attention-table "$O/sdpa.yaml" > "$O/sdpa.jsonl" 2> "$O/sdpa.err"
echo "sdpa rc=$? rows=$(wc -l < "$O/sdpa.jsonl")"
PROFILE=1 OUT="$O/steps" ./run5/run.sh
