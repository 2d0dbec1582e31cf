"""Tensor-core rate under sustained load on one GPU: a burst of ten products after
warm-up (how GEMM tables are measured) against the same product run back to back for
tens of seconds, and inside a training-like mix with memory-bound kernels. nvidia-smi
samples SM clock, power, temperature and the clock-event reasons every 100 ms."""
import json, subprocess, sys, time, torch

out = sys.argv[1]
dev = torch.device("cuda")
n = 8192
a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
a8 = a.to(torch.float8_e4m3fn)
b8 = b.to(torch.float8_e4m3fn).t().contiguous().t()
one = torch.ones((), device=dev)
x = torch.randn(256 << 20, device=dev, dtype=torch.float32)  # 1 GiB
y = torch.empty_like(x)
flops = 2.0 * n ** 3

def gemm():
    return a @ b

def gemm8():
    return torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

def add():
    torch.add(x, 1.0, out=y)

def timed(fn, reps):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / 1e3

def smi_start(path):
    q = "timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active"
    return subprocess.Popen(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits", "-lms", "100"],
                            stdout=open(path, "w"), stderr=subprocess.STDOUT)

res = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
smi = smi_start(f"{out}/smi.csv")
marks = []

def mark(name):
    marks.append((name, time.time()))

def cool(sec):
    mark("idle")
    time.sleep(sec)

def burst(fn, name):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    mark(name + "-burst")
    t = timed(fn, 10)
    res[name + "_burst_tflops"] = 10 * flops / t / 1e12

def sustained(fn, name, sec, mix=None):
    mark(name)
    series = []
    t_end = time.time() + sec
    while time.time() < t_end:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        reps = 0
        for _ in range(50):
            if mix:
                g0, g1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                g0.record()
                fn()
                g1.record()
                for _ in range(mix):
                    add()
            else:
                fn()
            reps += 1
        e.record()
        e.synchronize()
        el = s.elapsed_time(e) / 1e3
        rec = {"t": time.time(), "tflops_wall": reps * flops / el / 1e12}
        if mix:
            rec["last_gemm_tflops"] = flops / (g0.elapsed_time(g1) / 1e3) / 1e12
        series.append(rec)
    res[name + "_series"] = series

cool(10)
burst(gemm, "bf16")
sustained(gemm, "bf16_sustained", 40)
cool(15)
burst(gemm8, "fp8")
sustained(gemm8, "fp8_sustained", 30)
cool(15)
# one bf16 product (~1.4 ms) then three 1 GiB adds (~0.5 ms each): about half the time in tensor cores
sustained(gemm, "bf16_mix", 30, mix=3)
cool(5)
mark("end")
smi.terminate()
res["marks"] = marks
json.dump(res, open(f"{out}/sustained.json", "w"), indent=1)
print(json.dumps({k: v for k, v in res.items() if not k.endswith("series") and k != "marks"}))
for k in [k for k in res if k.endswith("series")]:
    s = res[k]
    key = "last_gemm_tflops" if "mix" in k else "tflops_wall"
    print(k, "first", round(s[0][key]), "median last 10", round(sorted(r[key] for r in s[-10:])[5]), "n", len(s))
