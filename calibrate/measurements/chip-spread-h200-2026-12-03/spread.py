"""One board's speed under its power cap, for the spread between boards of one SKU
(docs/accuracy.md, "Sensitivity: the slowest GPU of the job"). Run once per machine:
the board's identity (UUID, serial), then an 8192^3 BF16 product back to back for 30 s
after a 10 s idle, timed per 100 products by CUDA events, with nvidia-smi sampling clock,
power and temperature every 100 ms; then the same for a 1 GiB bf16 copy (memory-bound,
not capped), then the product again (the same board's repeatability). Reports the burst rate (the first 20 products), the sustained rate (median
of the last 20 s) and the median clock, power and temperature over that window."""
import json, statistics, subprocess, sys, time, torch

out = sys.argv[1]
ident = subprocess.run(["nvidia-smi", "--query-gpu=name,uuid,serial,pci.bus_id,vbios_version,driver_version,"
                        "power.limit,clocks.max.sm", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
q = "timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active"
smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits", "-lms", "100"],
                       stdout=open(f"{out}/smi.csv", "w"), stderr=subprocess.STDOUT)
dev = torch.device("cuda")
n = 8192
a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
c = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
xb = torch.randn(512 << 20, device=dev, dtype=torch.bfloat16)
yb = torch.empty_like(xb)


def series(fn, work, seconds, batch):
    """[(wall time at the batch's end, rate over the batch)] for `seconds` of back-to-back batches."""
    pts = []
    t_end = time.time() + seconds
    while not pts or time.time() < t_end:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(batch):
            fn()
        e.record()
        e.synchronize()
        pts.append((time.time(), work * batch / (s.elapsed_time(e) * 1e-3)))
    return pts


def window_smi(t0, t1):
    rows = []
    for line in open(f"{out}/smi.csv"):
        p = [x.strip() for x in line.split(",")]
        if len(p) < 5:
            continue
        try:
            t = time.mktime(time.strptime(p[0].split(".")[0], "%Y/%m/%d %H:%M:%S")) + float("0." + p[0].split(".")[1])
        except (ValueError, IndexError):
            continue
        if t0 <= t <= t1:
            rows.append((float(p[1]), float(p[2]), float(p[3])))
    med = lambda i: statistics.median(r[i] for r in rows) if rows else None
    return {"sm_mhz": med(0), "power_w": med(1), "temp_c": med(2), "samples": len(rows)}


cases = []
for name, fn, work, unit, batch in [("gemm-8192-bf16", lambda: torch.mm(a, b, out=c), 2.0 * n ** 3 / 1e12, "TFLOP/s", 20),
                                    ("copy-1GiB-bf16", lambda: yb.copy_(xb), 2.0 * xb.numel() * 2 / 1e9, "GB/s", 20),
                                    ("gemm-8192-bf16-again", lambda: torch.mm(a, b, out=c), 2.0 * n ** 3 / 1e12, "TFLOP/s",
                                     20)]:
    torch.cuda.synchronize()
    time.sleep(10)
    burst = series(fn, work, 0.0, batch)  # one batch at full clocks
    pts = series(fn, work, 30.0, batch)
    t1 = pts[-1][0]
    late = [r for t, r in pts if t >= t1 - 20]
    time.sleep(0.3)
    cases.append({"case": name, "unit": unit, "burst": burst[0][1], "sustained": statistics.median(late),
                  "sustained_p10": sorted(late)[len(late) // 10], "sustained_p90": sorted(late)[9 * len(late) // 10],
                  "batches": len(late), **window_smi(t1 - 20, t1)})
smi.terminate()
res = {"board": ident, "torch": torch.__version__, "cases": cases}
json.dump(res, open(f"{out}/spread.json", "w"), indent=1)
print(json.dumps(res, indent=1))
