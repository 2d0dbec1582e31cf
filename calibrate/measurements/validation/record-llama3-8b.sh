#!/bin/bash
# On one H200: the validation scenario with GQA and rotary recorded by the real backend
# (its own attention kernel, as the other recordings here), three runs of
# `validate --profile calibrate/profiles/h200-own-attention.yaml --iterations 5 --warmup 2`.
# The first is llama3-8b-4layers-1xh200.sqlite; the next two repeat/…-run1, -run2.
# .device/ holds a stripped build/clustersim-real and the shared libraries the GPU machine
# lacks (libsqlite3, libyaml-cpp in .device/lib; Open MPI's in .device/libmpi).
set -u
cd "$(dirname "$0")/../../.."
export LD_LIBRARY_PATH=$PWD/.device/lib:${LD_LIBRARY_PATH:-}:$PWD/.device/libmpi
export CLUSTERSIM_ATTENTION=own
O=${OUT:-/tmp}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv,noheader
S=scenarios/examples/validation/llama3-8b-4layers-1xh200.yaml
for n in 1 2 3; do
  timeout 150 .device/clustersim-real validate $S --profile calibrate/profiles/h200-own-attention.yaml \
    --iterations 5 --warmup 2 --set output.sqlite=$O/llama3-8b-4layers-$n.sqlite --json > $O/validate-$n.json 2>/dev/null
  echo "run $n rc=$? $(cat $O/validate-$n.json | tr -d '\n')"
done
