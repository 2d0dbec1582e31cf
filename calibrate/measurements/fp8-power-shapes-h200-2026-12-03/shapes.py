"""FP8 and BF16 GEMMs of real layers' shapes under the H200's 700 W cap: the sustained rate,
the SM clock and the board power of each, for the energy per FLOP the power model gives FP8
(docs/model.md, "Clocks under the power cap": 0.55 of BF16's, measured on 8192^3 alone).
Each case follows an idle pause: a burst (first ~20 ms), then back to back for 7 s;
nvidia-smi samples clock and power every 100 ms; a case reports its last 5 s.
FP8 runs torch._scaled_mm with per-tensor scales (e4m3 x e4m3 -> bf16), as the model's
FP8 efficiency was measured. M is the tokens of one micro-batch (8,192), N and K the
layer's at the tensor-parallel size named.
"""
import datetime, json, statistics, subprocess, sys, time, torch

out = sys.argv[1]
dev = torch.device("cuda")
q = "timestamp,clocks.sm,power.draw,clocks_event_reasons.active,temperature.gpu"
smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits", "-lms", "100"],
                       stdout=open(f"{out}/smi.csv", "w"), stderr=subprocess.STDOUT)
M = 8192
shapes = [  # name, n, k
    ("cube-8192", 8192, 8192),
    ("405b-tp8-qkv", 2304, 16384), ("405b-tp8-proj", 16384, 2048),
    ("405b-tp8-fc1", 13312, 16384), ("405b-tp8-fc2", 16384, 6656),
    ("70b-tp4-qkv", 2560, 8192), ("70b-tp4-proj", 8192, 2048),
    ("70b-tp4-fc1", 14336, 8192), ("70b-tp4-fc2", 8192, 7168),
    ("8b-tp1-qkv", 6144, 4096), ("8b-tp1-fc1", 28672, 4096), ("8b-tp1-fc2", 4096, 14336),
]

def make(n, k, fp8):
    a = torch.randn(M, k, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
    if not fp8:
        bt = b.t()
        return lambda: torch.mm(a, bt)
    a8 = a.to(torch.float8_e4m3fn)
    b8 = b.to(torch.float8_e4m3fn).t()  # column-major second operand, as _scaled_mm wants
    one = torch.ones((), device=dev, dtype=torch.float32)
    return lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

def timed(fn, reps):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / 1e3

res = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cases": []}
time.sleep(2)
idle0 = time.time()
time.sleep(4)
res["idle_window"] = [idle0 + 1, time.time()]
for name, n, k in shapes:
    for fp8 in (False, True):
        fn = make(n, k, fp8)
        flops = 2.0 * M * n * k
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        time.sleep(4)
        one = timed(fn, 1)
        reps = max(2, int(0.02 / one))
        burst = reps * flops / timed(fn, reps) / 1e12
        t0 = time.time()
        rates = []
        while time.time() - t0 < 7:
            r = max(2, int(0.1 / one))
            rates.append(r * flops / timed(fn, r) / 1e12)
        t1 = time.time()
        c = {"case": name, "dtype": "fp8" if fp8 else "bf16", "m": M, "n": n, "k": k, "burst_tflops": burst,
             "sustained_tflops": statistics.median(rates[len(rates) // 3:]), "window": [t0 + 2, t1]}
        res["cases"].append(c)
        print(f"{name:14s} {c['dtype']:4s} burst {burst:7.1f} sustained {c['sustained_tflops']:7.1f} TFLOP/s", flush=True)
        del fn
        torch.cuda.empty_cache()
smi.terminate()
time.sleep(0.3)

def ts(s):
    return datetime.datetime.strptime(s, "%Y/%m/%d %H:%M:%S.%f").timestamp()

rows = []
for line in open(f"{out}/smi.csv"):
    p = [v.strip() for v in line.split(",")]
    try:
        rows.append((ts(p[0]), float(p[1]), float(p[2]), p[3], float(p[4])))
    except (ValueError, IndexError):
        pass

def window(w):
    sel = [r for r in rows if w[0] <= r[0] <= w[1]]
    if not sel:
        return {}
    return {"sm_mhz": statistics.median(r[1] for r in sel), "power_w": statistics.median(r[2] for r in sel),
            "reasons": sorted(set(r[3] for r in sel)), "temp_c": statistics.median(r[4] for r in sel), "samples": len(sel)}

res["idle"] = window(res["idle_window"])
print("idle", res["idle"])
for c in res["cases"]:
    c.update(window(c["window"]))
json.dump(res, open(f"{out}/shapes.json", "w"), indent=1)
print(f"{'case':14s} {'dtype':5s} {'burst':>7s} {'sust':>7s} {'MHz':>6s} {'W':>6s}")
for c in res["cases"]:
    print(f"{c['case']:14s} {c['dtype']:5s} {c['burst_tflops']:7.1f} {c['sustained_tflops']:7.1f} {c.get('sm_mhz', 0):6.0f} {c.get('power_w', 0):6.1f}")
