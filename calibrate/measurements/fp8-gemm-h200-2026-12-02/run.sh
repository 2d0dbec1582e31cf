#!/bin/bash
# The GEMM calibration suite (bf16, fp16, fp8 through the real backend's cuBLASLt path,
# FP8 with per-tensor scale pointers as Transformer Engine issues it), the FP8 / BF16
# GEMM rate tests, and the GPT-3 1.3B step in BF16 and FP8 on one H200.
# .device/ holds stripped copies of build/clustersim-real and build/tests/real_backend_test,
# with the shared libraries they need that the GPU machine lacks (.device/lib, .device/libmpi).
# Results go to $OUT (8 files).
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; mkdir -p "$O"
export NCCL_NVLS_ENABLE=0
D=""
all=$(find /usr/local /opt /usr/lib /usr/lib64 -name libcudnn.so.9 2>/dev/null)
p=$(echo "$all" | grep nvidia/cudnn | head -1); [ -z "$p" ] && p=$(echo "$all" | head -1)
[ -n "$p" ] && D=":$(dirname "$p")" && export CLUSTERSIM_CUDNN_LIBRARY=$p
export LD_LIBRARY_PATH=$PWD/.device/lib$D:${LD_LIBRARY_PATH:-}:$PWD/.device/libmpi
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  echo "CLUSTERSIM_CUDNN_LIBRARY=${CLUSTERSIM_CUDNN_LIBRARY:-}"
  echo "NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
  sha256sum .device/clustersim-real .device/real_backend_test
  ldd .device/clustersim-real
  lt=$(ldd .device/clustersim-real | awk '/libcublasLt/{print $3}')
  echo "libcublasLt: $lt -> $(readlink -f "$lt")"
  python3 -c "import ctypes,sys; l=ctypes.CDLL(sys.argv[1]); print('cublasLtGetVersion', l.cublasLtGetVersion())" "$lt" 2>&1 | head -2
  python3 -m pip show nvidia-cublas 2>/dev/null | grep -E '^(Name|Version)'
} > "$O/env.txt" 2>&1
grep -E "not found|cublasLtGetVersion|NVIDIA" "$O/env.txt"

echo "== calibrate --suite gemm --passes 3 ($(el))"
timeout 440 .device/clustersim-real calibrate --suite gemm --passes 3 --out "$O/gemm-h200.yaml" \
  --raw "$O/gemm-h200.raw.sqlite" > "$O/calibrate.log" 2>&1
echo "calibrate rc=$? ($(el))"; tail -2 "$O/calibrate.log"
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader >> "$O/env.txt"

echo "== tests ($(el))"
timeout 30 .device/real_backend_test \
  --gtest_filter='RealBackend.Fp8GemmWithScalesAndBothAccumulators:RealBackend.Gemm8192Rate' > "$O/test.log" 2>&1
echo "tests rc=$? ($(el))"; grep -E "TFLOP|OK|FAIL" "$O/test.log"

for dt in bf16 fp8; do
  echo "== real $dt ($(el))" | tee -a "$O/real.log"
  timeout 55 .device/clustersim-real real scenarios/examples/real/gpt3-1.3b-1xh200.yaml --set model.dtype=$dt \
    --iterations 5 --warmup 2 --set output.sqlite="$O/real-$dt.sqlite" >> "$O/real.log" 2>&1
  echo "real $dt rc=$? ($(el))" | tee -a "$O/real.log"
done
grep -E "^==|iteration|MFU|GPUs|attention|rc=" "$O/real.log"
