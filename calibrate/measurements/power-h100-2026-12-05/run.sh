#!/bin/bash
# The H200 power measurements again on one H100 SXM: what each kind of kernel draws under the 700 W cap
# (../power-h200-2026-12-02/power.py) and the BF16 and FP8 GEMMs of Llama layers' shapes at the cap
# (../fp8-power-shapes-h200-2026-12-03/shapes.py), after the decode-size GEMMs of
# ../decode-gemm-h200-2026-12-03/decode_gemm.py (weights streamed from HBM). Each script's docstring says what it runs.
set -u
cd "$(dirname "$0")"
O=${OUT:-/tmp/out}; mkdir -p "$O"
{
  date -u
  q=name,driver_version,power.limit,power.max_limit,clocks.max.sm,clocks.max.mem,memory.total,serial,pci.bus_id
  nvidia-smi --format=csv --query-gpu=$q
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
} > "$O/env.txt" 2>&1
cat "$O/env.txt"
PYTHONUNBUFFERED=1 python3 ../decode-gemm-h200-2026-12-03/decode_gemm.py > "$O/decode_gemm.jsonl" 2>&1
tail -3 "$O/decode_gemm.jsonl"
PYTHONUNBUFFERED=1 python3 ../power-h200-2026-12-02/power.py "$O" 2>&1 | tee "$O/run.log"
PYTHONUNBUFFERED=1 python3 ../fp8-power-shapes-h200-2026-12-03/shapes.py "$O" 2>&1 | tee -a "$O/run.log" | tail -30
nvidia-smi --query-gpu=temperature.gpu,power.draw,clocks.sm --format=csv >> "$O/env.txt"
