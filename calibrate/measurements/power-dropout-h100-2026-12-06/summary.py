"""Medians of nvidia-smi's SM clock and board power over each window of run.sh's output folder:
the last 80 % of each step variant's timed steps (their count times the median step, back from its
end mark) and the last 6 s of each kernel case of power_dropout.py.  python3 summary.py OUT"""
import datetime, json, statistics, sys

out = sys.argv[1] if len(sys.argv) > 1 else "out"


def ts(s):
    return datetime.datetime.strptime(s, "%Y/%m/%d %H:%M:%S.%f").timestamp()


rows = []
for line in open(f"{out}/smi.csv"):
    p = [v.strip() for v in line.split(",")]
    try:
        rows.append((ts(p[0]), float(p[1]), float(p[2]), p[3], p[4]))
    except (ValueError, IndexError):
        pass


def window(t0, t1):
    sel = [r for r in rows if t0 <= r[0] <= t1]
    if not sel:
        return "no samples"
    return (f"{statistics.median(r[1] for r in sel):6.0f} MHz {statistics.median(r[2] for r in sel):6.1f} W "
            f"({len(sel)} samples, reasons {','.join(sorted(set(r[3] for r in sel)))})")


marks = {}
for line in open(f"{out}/marks.txt"):
    name, what, t = line.split()
    marks.setdefault(name, {})[what] = float(t)
print("step variant             median step   SM clock and board power over its timed steps")
for name, m in marks.items():
    try:
        j = json.load(open(f"{out}/step-{name}.json"))
    except (OSError, ValueError):
        print(f"{name:24s} no JSON")
        continue
    n = j["args"]["iterations"]
    t1 = m["end"] - 0.3
    t0 = t1 - 0.8 * n * j["step_s"]
    print(f"{name:24s} {j['step_s'] * 1e3:8.1f} ms   {window(t0, t1)}")
for part in ("power_dropout", "power_parts", "duty_cycle"):
    try:
        k = json.load(open(f"{out}/{part}.json"))
    except (OSError, ValueError):
        continue
    print(f"{part} ({k['gpu']}, torch {k['torch']}, cuDNN {k['cudnn']})")
    print(f"idle                                                           {window(*k['idle_window'])}")
    for c in k["cases"]:
        print(f"{c['case']:22s} burst {c['burst']:8.1f} at the cap {c['sustained']:8.1f} {c['unit']:8s} "
              f"{window(*c['window'])}")
