#!/bin/bash
# One device call: the GPT replica's step (../mcore-step-h200/mcore_step.py) at 8, 24 and 48 layers, with and without
# a 3 ms GPU spin before each micro-batch's backward (after the NaN check's host wait), alternated, twice; then the
# spin before each forward instead, at 24 layers. Each run writes one JSON file into $1 (default: out).
set -e
out=${1:-out}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
py="python3 $here/../mcore-step-h200/mcore_step.py --iterations 5 --warmup 2 --no-profile"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > "$out/env.txt"
for rep in 1 2; do
  for layers in 8 24 48; do
    for hs in 0 3000; do
      $py --layers $layers --head-start-us $hs --head-start-at backward --json "$out/l$layers-bwd$hs-r$rep.json" \
        > /dev/null
      echo "layers $layers spin-before-backward $hs us rep $rep: done"
    done
  done
  $py --layers 24 --head-start-us 3000 --head-start-at forward --json "$out/l24-fwd3000-r$rep.json" > /dev/null
done
