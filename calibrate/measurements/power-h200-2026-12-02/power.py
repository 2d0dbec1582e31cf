"""What each kind of kernel draws under the H200's 700 W cap, for the power model
(docs/model.md, "Clocks under the power cap"). Each case runs after an idle pause: a burst
(the first ~20 ms, full clocks), then back to back for 8 s. nvidia-smi samples the SM
clock and board power every 100 ms; each case reports its rate, median clock and power
over its last 6 s.
  stream-add    fp32 add of a scalar to 1 GiB (8 bytes per element moved)
  stream-copy   bf16 copy of 1 GiB
  attn-fwdbwd   causal SDPA (cuDNN / flash), bf16, 8 x 32 heads x 4096 x 128, forward + backward
  attn-fwd      the same, forward only
  gemm-1add     8192^3 bf16 product then one 1 GiB fp32 add (a mix the model predicts, held out)
  gemm-ln       8192^3 bf16 product then a LayerNorm over 8192 x 8192 bf16 (another held-out mix)
"""
import datetime, json, statistics, subprocess, sys, time, torch
import torch.nn.functional as F

out = sys.argv[1]
dev = torch.device("cuda")
q = "timestamp,clocks.sm,power.draw,clocks_event_reasons.active,temperature.gpu"
smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits", "-lms", "100"],
                       stdout=open(f"{out}/power-smi.csv", "w"), stderr=subprocess.STDOUT)
n = 8192
a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
x = torch.randn(256 << 20, device=dev, dtype=torch.float32)
y = torch.empty_like(x)
xb = torch.randn(512 << 20, device=dev, dtype=torch.bfloat16)
yb = torch.empty_like(xb)
ln_in = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
ln_w = torch.ones(n, device=dev, dtype=torch.bfloat16)
B, H, S, D = 8, 32, 4096, 128
qq = torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
kk = torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
vv = torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
go = torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16)
attn_fwd_flops = 4.0 * B * H * S * S * D / 2  # causal: half the score matrix
gemm_flops = 2.0 * n ** 3

def add():
    torch.add(x, 1.0, out=y)

def copy():
    yb.copy_(xb)

def attn_fwd():
    with torch.no_grad():
        F.scaled_dot_product_attention(qq, kk, vv, is_causal=True)

def attn_fwdbwd():
    o = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True)
    o.backward(go)

def gemm():
    torch.mm(a, b)

def gemm_1add():
    gemm(); add()

def gemm_ln():
    gemm(); F.layer_norm(ln_in, (n,), ln_w)

cases = [  # name, fn, (work unit, amount per call)
    ("stream-add", add, ("GB/s", 8.0 * (256 << 20) / 1e9)),
    ("stream-copy", copy, ("GB/s", 4.0 * (512 << 20) / 1e9)),
    ("attn-fwdbwd", attn_fwdbwd, ("TFLOP/s", 3.5 * attn_fwd_flops / 1e12)),
    ("attn-fwd", attn_fwd, ("TFLOP/s", attn_fwd_flops / 1e12)),
    ("gemm", gemm, ("TFLOP/s", gemm_flops / 1e12)),
    ("gemm-1add", gemm_1add, ("TFLOP/s", gemm_flops / 1e12)),
    ("gemm-ln", gemm_ln, ("TFLOP/s", gemm_flops / 1e12)),
]

def timed(fn, reps):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / 1e3

res = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cases": []}
time.sleep(3)
idle0 = time.time()
time.sleep(5)
res["idle_window"] = [idle0 + 1, time.time()]
for name, fn, (unit, per) in cases:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    time.sleep(5)
    one = timed(fn, 1)
    reps = max(2, int(0.02 / one))
    burst = reps * per / timed(fn, reps)
    t0 = time.time()
    rates = []
    while time.time() - t0 < 8:
        r = max(2, int(0.1 / one))
        rates.append(r * per / timed(fn, r))
    t1 = time.time()
    tail = rates[len(rates) // 4:]
    c = {"case": name, "unit": unit, "burst": burst, "sustained": statistics.median(tail), "window": [t0 + 2, t1]}
    res["cases"].append(c)
    print(f"{name:12s} burst {burst:8.1f} sustained {c['sustained']:8.1f} {unit}", flush=True)
smi.terminate()
time.sleep(0.3)

def ts(s):
    return datetime.datetime.strptime(s, "%Y/%m/%d %H:%M:%S.%f").timestamp()

rows = []
for line in open(f"{out}/power-smi.csv"):
    p = [v.strip() for v in line.split(",")]
    try:
        rows.append((ts(p[0]), float(p[1]), float(p[2]), p[3]))
    except (ValueError, IndexError):
        pass

def window(w):
    sel = [r for r in rows if w[0] <= r[0] <= w[1]]
    if not sel:
        return {}
    return {"sm_mhz": statistics.median(r[1] for r in sel), "power_w": statistics.median(r[2] for r in sel),
            "reasons": sorted(set(r[3] for r in sel)), "samples": len(sel)}

res["idle"] = window(res["idle_window"])
print("idle", res["idle"])
for c in res["cases"]:
    c.update(window(c["window"]))
    print(c["case"], "clock", c.get("sm_mhz"), "MHz power", c.get("power_w"), "W", c.get("reasons"))
json.dump(res, open(f"{out}/power.json", "w"), indent=1)
