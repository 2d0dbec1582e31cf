#!/bin/bash
# The real backend running imported Chakra traces on one H200: the GPT-3 1.3B example's
# own plan, the same plan read back from its export (kernels with their shapes), and the
# export with the shapes stripped (compute nodes known only by their recorded times, run
# as kernels that hold the GPU that long). .device/ holds a stripped copy of
# build/clustersim-real and the shared libraries it needs that the GPU machine lacks.
set -u
cd "$(dirname "$0")/../../.."
L=/tmp/logs; mkdir -p $L
D=""
for n in libcudnn.so.9; do
  all=$(find /usr/local /opt /usr/lib /usr/lib64 -name "$n" 2>/dev/null)
  p=$(echo "$all" | grep nvidia/cudnn | head -1); [ -z "$p" ] && p=$(echo "$all" | head -1)
  [ -n "$p" ] && D="$D:$(dirname $p)" && export CLUSTERSIM_CUDNN_LIBRARY=$p
done
export LD_LIBRARY_PATH=$PWD/.device/lib$D:${LD_LIBRARY_PATH:-}:$PWD/.device/libmpi
ldd .device/clustersim-real | grep "not found"
M=calibrate/measurements/chakra-real-h200-2026-12-02
t0=$(date +%s)
for pass in 1 2; do
  for s in scenarios/examples/real/gpt3-1.3b-1xh200.yaml $M/imported.yaml $M/foreign.yaml; do
    n=$(basename $s .yaml)-$pass
    timeout 120 .device/clustersim-real $s --iterations 5 --warmup 2 --set output.sqlite=$L/$n.sqlite > $L/$n.log 2>&1
    echo "$n rc=$? $(( $(date +%s) - t0 )) s: $(grep -E '^iteration' $L/$n.log) $(grep -E 'error' $L/$n.log | head -2)"
  done
done
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
tar czf "${OUT:-.}/results.tgz" -C /tmp logs
