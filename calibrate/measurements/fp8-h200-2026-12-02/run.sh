#!/bin/bash
# FP8 GEMMs as Transformer Engine issues them (scale pointers, fast/split accumulation),
# the cast-transpose, and an FP8 training step on one H200. .device/ holds stripped
# copies of build/clustersim-real and build/tests/real_backend_test, with the shared
# libraries they need that the GPU machine lacks (.device/lib, .device/libmpi).
set -u
cd "$(dirname "$0")/.."
L=/tmp/logs; mkdir -p $L
D=""
for n in libcudnn.so.9; do
  all=$(find /usr/local /opt /usr/lib /usr/lib64 -name "$n" 2>/dev/null)
  p=$(echo "$all" | grep nvidia/cudnn | head -1); [ -z "$p" ] && p=$(echo "$all" | head -1)
  [ -n "$p" ] && D="$D:$(dirname $p)" && export CLUSTERSIM_CUDNN_LIBRARY=$p
done
export LD_LIBRARY_PATH=$PWD/.device/lib$D:${LD_LIBRARY_PATH:-}:$PWD/.device/libmpi
ldd .device/clustersim-real | grep "not found"
t0=$(date +%s)
timeout 200 .device/real_backend_test --gtest_filter='RealBackend.Fp8*:RealBackend.RunsASmallTrainingPlan' > $L/test.log 2>&1
echo "tests rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^\[  |fp8|TFLOP|Failure|Expected|actual" $L/test.log | head -40
for dt in bf16 fp8; do
  timeout 150 .device/clustersim-real scenarios/examples/real/gpt3-1.3b-1xh200.yaml --set model.dtype=$dt --iterations 3 --warmup 1 --set output.sqlite=$L/real-$dt.sqlite > $L/real-$dt.log 2>&1
  echo "real $dt rc=$? $(( $(date +%s) - t0 )) s"; grep -E "iteration|MFU|attention|error" $L/real-$dt.log | head -6
done
tar czf "${RESULTS:-.}/results.tgz" -C /tmp logs
