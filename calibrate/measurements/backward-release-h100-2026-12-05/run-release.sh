#!/bin/bash
# One device call: release.py at 4, 16 and 48 MLP blocks (hidden 4096, 4096 tokens), twice, alternated by depth.
set -e
out=${1:-out}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > "$out/env-release.txt"
for rep in 1 2; do
  for layers in 4 16 48; do
    python3 "$here/release.py" --layers $layers > "$out/release-l$layers-r$rep.json"
    echo "layers $layers rep $rep: $(grep -E 'check_s_per|host_engine_start_s"|autograd' "$out/release-l$layers-r$rep.json" | tr -d '\n ')"
  done
done
