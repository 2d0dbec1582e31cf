#!/bin/bash
# Tensor-core rate and clocks under sustained load on one H200 (sustained.py says what runs).
set -u
cd "$(dirname "$0")"
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,power.limit,power.max_limit,clocks.max.sm,clocks.sm,temperature.gpu --format=csv
python3 sustained.py $O 2>&1 | tail -20
python3 - "$O" <<'PY'
import csv, json, sys
o = sys.argv[1]
r = json.load(open(f"{o}/sustained.json"))
marks = r["marks"]
rows = [l.split(", ") for l in open(f"{o}/smi.csv") if l.count(",") >= 5]
import datetime
def ts(s):
    return datetime.datetime.strptime(s, "%Y/%m/%d %H:%M:%S.%f").timestamp()
for i, (name, t0) in enumerate(marks[:-1]):
    t1 = marks[i + 1][1]
    sel = []
    for row in rows:
        try:
            t = ts(row[0])
        except ValueError:
            continue
        if t0 <= t < t1:
            sel.append(row)
    if not sel:
        continue
    clk = sorted(float(x[1]) for x in sel); pw = sorted(float(x[3]) for x in sel)
    reasons = sorted(set(x[5].strip() for x in sel))
    print(f"{name:16s} n={len(sel):4d} sm MHz median {clk[len(clk)//2]:.0f} min {clk[0]:.0f}  power W median {pw[len(pw)//2]:.0f} max {pw[-1]:.0f}  temp {sel[-1][4]}  reasons {reasons[:4]}")
PY
