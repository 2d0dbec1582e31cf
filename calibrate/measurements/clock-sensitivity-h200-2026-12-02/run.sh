#!/bin/bash
# How clock-sensitive each kind of kernel is under the H200's power cap: (1) sizes.py, GEMM
# shapes from 2048^3 to the Llama 3 8B layer's, each as a burst after an idle pause and
# back to back for 6 s; (2) the GPT-3 1.3B example's plan 120 times back to back through
# the real backend, keeping its timeline (per-kernel times at the capped clock) to set
# against the simulator's. Results go to $OUT.
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; mkdir -p "$O"
M=calibrate/measurements/clock-sensitivity-h200-2026-12-02
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader > "$O/env.txt"
sha256sum .device/clustersim-real >> "$O/env.txt"
python3 $M/sizes.py "$O" 2>&1 | tail -20
export LD_LIBRARY_PATH=$PWD/.device/lib:${LD_LIBRARY_PATH:-}:$PWD/.device/libmpi
sleep 10
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active \
  --format=csv,noheader,nounits -lms 100 > "$O/step-smi.csv" &
S=$!
timeout 200 .device/clustersim-real scenarios/examples/real/gpt3-1.3b-1xh200.yaml --iterations 120 --warmup 0 --json \
  --set output.sqlite="$O/step-1.3b.sqlite" > "$O/step-1.3b.json" 2> "$O/step-1.3b.err"
echo "step rc=$?"
kill $S
python3 - "$O" <<'PY'
import json, sys
o = sys.argv[1]
d = json.load(open(f"{o}/step-1.3b.json"))
it = [d[f"iteration_{i}_s"] for i in range(int(d["iterations_timed"]))]
med = lambda xs: sorted(xs)[len(xs) // 2]
print("1.3b iterations", len(it), "first 5", [round(x, 4) for x in it[:5]], "median last 50", med(it[-50:]),
      "clock", d.get("sm_clock_mhz"), "power", d.get("power_w"))
PY
