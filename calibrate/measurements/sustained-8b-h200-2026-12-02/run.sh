#!/bin/bash
# A GEMM-bound training step under the H200's power cap: the real backend runs
# step-8b.yaml's plan 150 times back to back (about 80 s) after a 15 s idle, with cuDNN's
# fused attention, while nvidia-smi samples the SM clock and power every 100 ms. Its
# --json gives every iteration's time: the first iterations (burst clocks) against the
# steady state. Results go to $OUT.
set -u
cd "$(dirname "$0")/../../.."
O=${OUT:-/tmp/out}; mkdir -p "$O"
M=calibrate/measurements/sustained-8b-h200-2026-12-02
D=""
all=$(find /usr/local /opt /usr/lib /usr/lib64 -name libcudnn.so.9 2>/dev/null)
p=$(echo "$all" | grep nvidia/cudnn | head -1); [ -z "$p" ] && p=$(echo "$all" | head -1)
[ -n "$p" ] && D=":$(dirname "$p")" && export CLUSTERSIM_CUDNN_LIBRARY=$p
export CLUSTERSIM_ATTENTION=cudnn
export LD_LIBRARY_PATH=$PWD/.device/lib$D:${LD_LIBRARY_PATH:-}:$PWD/.device/libmpi
ldd .device/clustersim-real | grep "not found"
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader > "$O/env.txt"
sha256sum .device/clustersim-real >> "$O/env.txt"
echo "CLUSTERSIM_CUDNN_LIBRARY=${CLUSTERSIM_CUDNN_LIBRARY:-}" >> "$O/env.txt"
sleep 15
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv,noheader,nounits -lms 100 > "$O/step-smi.csv" &
S=$!
timeout 300 .device/clustersim-real $M/step-8b.yaml --iterations 150 --warmup 0 --json \
  --set output.sqlite="$O/step.sqlite" > "$O/step.json" 2> "$O/step.err"
echo "rc=$?"
kill $S
tail -3 "$O/step.err"
python3 - "$O" <<'PY'
import json, sys
o = sys.argv[1]
d = json.load(open(f"{o}/step.json"))
it = [d[f"iteration_{i}_s"] for i in range(int(d["iterations_timed"]))]
med = lambda xs: sorted(xs)[len(xs) // 2]
print("iterations", len(it), "first 5", [round(x, 4) for x in it[:5]])
print("median 0-4", med(it[:5]), "median 20-40", med(it[20:40]), "median last 50", med(it[-50:]))
rows = [l.split(", ") for l in open(f"{o}/step-smi.csv") if l.count(",") >= 5]
busy = [r for r in rows if float(r[3]) > 300]
clk = sorted(float(r[1]) for r in busy[20:]); pw = sorted(float(r[3]) for r in busy[20:])
print("busy samples", len(busy), "sm MHz median", med(clk), "min", clk[0], "max", clk[-1], "power W median", med(pw),
      "reasons", sorted(set(r[5].strip() for r in busy)))
PY
