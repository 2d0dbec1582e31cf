#!/bin/bash
# On one H100 SXM: the SM clock and board power while the Megatron-LM README 1.7B row's one-GPU step runs
# (../mcore-step-h200/mcore_step.py, three variants), and what attention with dropout and the dropout kernel
# draw beside the same kernels without it (power_dropout.py). nvidia-smi samples every 100 ms throughout;
# summary.py takes the medians over each window.
set -u
cd "$(dirname "$0")"
O=${OUT:-/tmp/out}; mkdir -p "$O"
{
  date -u
  q=name,driver_version,power.limit,power.max_limit,clocks.max.sm,clocks.max.mem,memory.total,serial,pci.bus_id
  nvidia-smi --format=csv --query-gpu=$q
  v='import torch as t; print("torch", t.__version__, "cuda", t.version.cuda, "cudnn", t.backends.cudnn.version())'
  python3 -c "$v"
} > "$O/env.txt" 2>&1
cat "$O/env.txt"
q=timestamp,clocks.sm,power.draw,clocks_event_reasons.active,temperature.gpu
nvidia-smi --query-gpu=$q --format=csv,noheader,nounits -lms 100 > "$O/smi.csv" 2>&1 &
SMI=$!
sleep 3
S=../mcore-step-h200/mcore_step.py
run() {  # name, args: the step's window is written to marks.txt around the timed steps
  echo "$1 start $(date +%s.%N)" >> "$O/marks.txt"
  PYTHONUNBUFFERED=1 python3 $S --no-profile --warmup 3 --iterations 30 --json "$O/step-$1.json" "${@:2}" \
    > "$O/step-$1.log" 2>&1
  echo "$1 end $(date +%s.%N)" >> "$O/marks.txt"
  tail -2 "$O/step-$1.log"
  sleep 5
}
run readme-1.7b
run nodrop --dropout 0
run h4096 --hidden 4096 --heads 32 --layers 8
PYTHONUNBUFFERED=1 python3 power_dropout.py "$O" 2>&1 | tee "$O/power_dropout.log"
kill $SMI
nvidia-smi --query-gpu=temperature.gpu,power.draw,clocks.sm --format=csv >> "$O/env.txt"
