#!/bin/bash
# On one H200: the four single-GPU validation steps recorded by the real backend (its own
# attention kernel, CLUSTERSIM_ATTENTION=own), three runs each of
# `validate --profile calibrate/profiles/h200-own-attention.yaml --iterations 5 --warmup 2`,
# back to back (2026-12-03). Of each step's three, the run with the median real
# iteration is NAME.sqlite here and the other two, in run order, repeat/NAME-run1, -run2.
# .device/ holds a stripped build/clustersim-real and the shared libraries the GPU machine
# lacks (libsqlite3, libyaml-cpp in .device/lib; Open MPI's in .device/libmpi).
set -u
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/.device/lib:${LD_LIBRARY_PATH:-}:$PWD/.device/libmpi
export CLUSTERSIM_ATTENTION=own
O=/tmp/rec; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader
for n in 1 2 3; do
  for s in validation/gpt3-1.3b-mb3-1xh200 validation/gpt-2560-seq3072-1xh200 validation/llama3-8b-4layers-1xh200 \
           real/gpt3-1.3b-1xh200; do
    b=$(basename $s)
    timeout 150 .device/clustersim-real validate scenarios/examples/$s.yaml \
      --profile calibrate/profiles/h200-own-attention.yaml --iterations 5 --warmup 2 \
      --set output.sqlite=$O/$b-$n.sqlite --json > $O/$b-$n.json 2>/dev/null
    echo "$b run $n rc=$? $(tr -d '\n' < $O/$b-$n.json)"
  done
done
tar czf ${OUT:-/tmp}/recordings.tgz -C $O .
