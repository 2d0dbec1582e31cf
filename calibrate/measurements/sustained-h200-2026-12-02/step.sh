#!/bin/bash
# A training step under the power cap: the real backend runs the GPT-3 1.3B example's own
# plan 200 times back to back (about 50 s) after a 15 s idle, with nvidia-smi sampling the
# SM clock and power every 100 ms; its --json gives every iteration's time, so the first
# iterations (burst clocks) can be set against the steady state.
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; mkdir -p $O
export LD_LIBRARY_PATH=$PWD/.device/lib:${LD_LIBRARY_PATH:-}:$PWD/.device/libmpi
ldd .device/clustersim-real | grep "not found"
sleep 15
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv,noheader,nounits -lms 100 > $O/step-smi.csv &
S=$!
date +%s.%N > $O/step-start
timeout 200 .device/clustersim-real scenarios/examples/real/gpt3-1.3b-1xh200.yaml --iterations 200 --warmup 0 --json \
  --set output.sqlite=/tmp/step.sqlite > $O/step.json 2> $O/step.err
echo "rc=$?"
kill $S
python3 - "$O" <<'PY'
import json, sys
o = sys.argv[1]
d = json.load(open(f"{o}/step.json"))
it = [d[f"iteration_{i}_s"] for i in range(int(d["iterations_timed"]))]
print("iterations", len(it), "first 5", [round(x, 4) for x in it[:5]])
print("median 0-4", sorted(it[:5])[2], "median 20-40", sorted(it[20:40])[10], "median last 40", sorted(it[-40:])[20])
rows = [l.split(", ") for l in open(f"{o}/step-smi.csv") if l.count(",") >= 5]
clk = sorted(float(r[1]) for r in rows[20:]); pw = sorted(float(r[3]) for r in rows[20:])
print("sm MHz median", clk[len(clk) // 2], "min", clk[0], "power W median", pw[len(pw) // 2], "reasons", sorted(set(r[5].strip() for r in rows)))
PY
