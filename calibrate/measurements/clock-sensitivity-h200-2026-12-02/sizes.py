"""How much each GEMM shape slows under the power cap: for each shape, after an idle
pause, a burst of products (full clocks), then the same product back to back for several
seconds (capped clocks). nvidia-smi samples the SM clock and power every 100 ms; each
window's median clock and power are reported beside the rates."""
import datetime, json, subprocess, sys, time, torch

out = sys.argv[1]
dev = torch.device("cuda")
shapes = [  # (name, m, n, k)
    ("sq8192", 8192, 8192, 8192),
    ("sq4096", 4096, 4096, 4096),
    ("sq2048", 2048, 2048, 2048),
    ("l8b-mlp-up", 8192, 28672, 4096),
    ("l8b-mlp-down", 8192, 4096, 14336),
    ("l8b-qkv", 8192, 6144, 4096),
    ("g1.3b-mlp-up", 4096, 8192, 2048),
    ("g1.3b-qkv", 4096, 6144, 2048),
    ("g1.3b-proj", 4096, 2048, 2048),
]
q = "timestamp,clocks.sm,power.draw,clocks_event_reasons.active"
smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits", "-lms", "100"],
                       stdout=open(f"{out}/sizes-smi.csv", "w"), stderr=subprocess.STDOUT)

def timed(fn, reps):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / 1e3

res = []
for name, m, n, k in shapes:
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
    fn = lambda: a @ b
    flops = 2.0 * m * n * k
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    time.sleep(4)  # idle: the clocks recover
    reps = max(3, int(0.02 / (flops / 700e12)))  # about 20 ms of work: within the first 0.1 s
    burst = reps * flops / timed(fn, reps) / 1e12
    t0 = time.time()
    series = []
    while time.time() - t0 < 6:
        r = max(10, int(0.2 / (flops / 700e12)))
        series.append(r * flops / timed(fn, r) / 1e12)
    t1 = time.time()
    sustained = sorted(series[len(series) // 2:])[len(series[len(series) // 2:]) // 2]
    res.append({"shape": name, "m": m, "n": n, "k": k, "burst_tflops": burst, "sustained_tflops": sustained,
                "window": [t0 + 2, t1]})
    print(f"{name:14s} {m}x{n}x{k}: burst {burst:6.0f}  sustained {sustained:6.0f}  ratio {sustained / burst:.3f}",
          flush=True)
    del a, b
smi.terminate()
time.sleep(0.3)
def ts(s):
    return datetime.datetime.strptime(s, "%Y/%m/%d %H:%M:%S.%f").timestamp()
rows = []
for line in open(f"{out}/sizes-smi.csv"):
    p = [x.strip() for x in line.split(",")]
    if len(p) < 4:
        continue
    try:
        rows.append((ts(p[0]), float(p[1]), float(p[2]), p[3]))
    except ValueError:
        pass
for r in res:
    sel = [x for x in rows if r["window"][0] <= x[0] <= r["window"][1]]
    if sel:
        r["sm_mhz_median"] = sorted(x[1] for x in sel)[len(sel) // 2]
        r["power_w_median"] = sorted(x[2] for x in sel)[len(sel) // 2]
        r["reasons"] = sorted(set(x[3] for x in sel))
    print(r["shape"], "clock", r.get("sm_mhz_median"), "MHz, power", r.get("power_w_median"), "W", r.get("reasons"))
json.dump(res, open(f"{out}/sizes.json", "w"), indent=1)
