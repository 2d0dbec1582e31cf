#!/bin/bash
# On one GPU (H100 or H200): each single-GPU validation step run by the real backend two ways, alternated
# twice: `--timing ops` (an event pair around every op, as calibrate times its tables) and
# `--timing stream` (no event between ops, as a framework's stream runs), each against the
# simulator with the built-in defaults of that GPU's preset (`validate`: kernels as timed against the first,
# from a full queue against the second). .device/ holds a stripped build/clustersim-real and
# the shared libraries the GPU machine lacks (libsqlite3, libyaml-cpp in .device/lib).
set -u
cd "$(dirname "$0")/../../.."
D=""  # cuDNN (PyTorch's wheel) for the attention ops, as the presets' attention is cuDNN's
all=$(find /usr/local /opt /usr/lib /usr/lib64 -name libcudnn.so.9 2>/dev/null)
p=$(echo "$all" | grep nvidia/cudnn | head -1); [ -z "$p" ] && p=$(echo "$all" | head -1)
[ -n "$p" ] && D=":$(dirname "$p")" && export CLUSTERSIM_CUDNN_LIBRARY=$p
export LD_LIBRARY_PATH=$PWD/.device/lib$D:${LD_LIBRARY_PATH:-}
O=${OUT:-/tmp/stream}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv,noheader | tee $O/gpu.txt
H100=""
grep -q H100 $O/gpu.txt && H100="--set cluster.preset=dgx-h100 --set cluster.gpus_per_node=1"
for round in 1 2; do
  for s in validation/gpt3-1.3b-mb3-1xh200 validation/gpt-2560-seq3072-1xh200 validation/llama3-8b-4layers-1xh200 \
           real/gpt3-1.3b-1xh200; do
    b=$(basename $s .yaml)
    for t in ops stream; do
      timeout 200 .device/clustersim-real validate scenarios/examples/$s.yaml $H100 --timing $t \
        --iterations 5 --warmup 2 --set output.sqlite=$O/$b-$t-$round.sqlite --json > $O/$b-$t-$round.json \
        2> $O/$b-$t-$round.err
      echo "$b $t round $round rc=$? $(tr -d '\n' < $O/$b-$t-$round.json) $(grep attention $O/$b-$t-$round.err)"
    done
  done
done
