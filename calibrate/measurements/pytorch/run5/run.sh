#!/bin/bash
# The seven one-GPU PyTorch steps of run3 and run4 again, each for 30 timed steps after 5 untimed ones (run3 timed
# 5, run4 10), with nvidia-smi sampling the SM clock and board power every 100 ms: steps long enough for the
# board's power controller to settle (docs/model.md, "Clocks under the power cap").
#   OUT=run5 ./run5/run.sh      (from calibrate/measurements/pytorch; on one H200 or H100)
# PROFILE=1 also profiles one step after the timed ones (torch.profiler; its kernels become the `spans`).
set -u
cd "$(dirname "$0")/.."
O=${OUT:-/tmp/out}; mkdir -p "$O"
nvidia-smi --format=csv --query-gpu=name,driver_version,power.limit,clocks.max.sm,serial > "$O/env.txt" 2>&1
q=timestamp,clocks.sm,power.draw,clocks_event_reasons.active,temperature.gpu
nvidia-smi --query-gpu=$q --format=csv,noheader,nounits -lms 100 > "$O/smi.csv" 2>&1 &
SMI=$!
for j in run3/pt-gpt3-1.3b-1xh200 run3/pt-gpt3-1.3b-mb3-1xh200 run3/pt-gpt-2560-seq3072-1xh200 \
         run3/pt-llama3-8b-4layers-1xh200 run4/pt-gpt-350m-1xh200 run4/pt-llama3-70b-2layers-1xh200 \
         run4/pt-llama3-8b-2layers-seq8192-1xh200; do
  n=$(basename $j)
  echo "$n start $(date +%s.%N)" >> "$O/marks.txt"
  python3 ../../pytorch_reference.py --scenario-json $j.json --iterations 30 --warmup 5 $([ -n "${PROFILE:-}" ] || echo --no-profile)  \
    --out "$O/$n.sqlite" > "$O/$n.log" 2>&1
  echo "$n end $(date +%s.%N) rc=$?" >> "$O/marks.txt"
  tail -1 "$O/$n.log"
done
kill $SMI
