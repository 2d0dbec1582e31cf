#!/bin/bash
# On one H200 (device tool): python3 sampler.py, twice, with the GPU's name and clocks.
set -e
cd "$(dirname "$0")"
O=${OUT:-.}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > "$O/env.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >> "$O/env.txt"
for n in 1 2; do python3 sampler.py > "$O/sampler-$n.jsonl"; done
cat "$O/env.txt" "$O"/sampler-*.jsonl
