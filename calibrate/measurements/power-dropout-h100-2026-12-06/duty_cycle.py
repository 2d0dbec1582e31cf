"""A GEMM's power at the full boost clock: GEMMs back to back for `on` ms, then the GPU idle for `off` ms, repeated
for 8 s, so that the board's one-second average stays under its limit and the clock at boost. With d the measured
busy share of the wall time, the GEMM's power above the idle floor at full clock is (P_avg - P_idle) / d, against
its power under the cap (power_parts.py). Medians over each case's last 6 s (summary.py's windows).
    python3 duty_cycle.py OUT [first|second]      (run_duty.sh's sampling around it)"""
import json, statistics, sys, time, torch

out = sys.argv[1]
dev = torch.device("cuda")
bf = torch.bfloat16


def case(name, m, n, k, on_ms, off_ms, fn=None, flops=None):
    """A product m x n x k (or fn, of `flops` a call) for `on` ms, then `off` ms idle."""
    if fn is None:
        a = torch.randn(m, k, device=dev, dtype=bf)
        b = torch.randn(k, n, device=dev, dtype=bf)
        fn, flops = (lambda: torch.mm(a, b)), 2.0 * m * n * k
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(10):
        fn()
    e.record()
    e.synchronize()
    one = s.elapsed_time(e) / 10 / 1e3
    reps = max(1, round(on_ms / 1e3 / one))
    time.sleep(5)
    t0 = time.time()
    busy, rates = 0.0, []
    while time.time() - t0 < 8:
        s.record()
        for _ in range(reps):
            fn()
        e.record()
        e.synchronize()
        dt = s.elapsed_time(e) / 1e3
        busy += dt
        rates.append(flops * reps / dt / 1e12)
        time.sleep(off_ms / 1e3)
    t1 = time.time()
    c = {"case": name, "unit": "TFLOP/s", "per_call": flops / 1e12, "burst": statistics.median(rates),
         "sustained": statistics.median(rates), "busy_share": busy / (t1 - t0), "window": [t0 + 2, t1]}
    print(f"{name:22s} rate {c['burst']:7.1f} TFLOP/s busy {c['busy_share']:.3f}", flush=True)
    return c


res = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
       "cases": []}
idle0 = time.time()
time.sleep(5)
res["idle_window"] = [idle0 + 1, time.time()]
which = sys.argv[2] if len(sys.argv) > 2 else "first"
if which == "first":  # the first run
    res["cases"].append(case("gemm-8192-duty40", 8192, 8192, 8192, 40, 60))
    res["cases"].append(case("gemm-8192-duty60", 8192, 8192, 8192, 60, 40))
    res["cases"].append(case("gemm-fc1-duty50", 4096, 8192, 2048, 50, 50))
elif which == "attention":  # cuDNN's causal forward, 8 x 32 heads x 4,096 x 128, at the cap and at duty 30 %
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q, k_, v = (torch.randn(8, 32, 4096, 128, device=dev, dtype=bf) for _ in range(3))

    def attn():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            F.scaled_dot_product_attention(q, k_, v, is_causal=True)
    fl = 4.0 * 8 * 32 * 4096 * 4096 * 128 / 2
    res["cases"].append(case("attn-fwd-8x32-duty30", 0, 0, 0, 30, 70, attn, fl))
    res["cases"].append(case("attn-fwd-8x32-duty100", 0, 0, 0, 1000, 0, attn, fl))
else:  # the second: the floor between bursts (a 64^3 product every 100 ms), shorter bursts, and back to back
    res["cases"].append(case("floor-64-every-100ms", 64, 64, 64, 0.001, 100))
    res["cases"].append(case("gemm-8192-duty20", 8192, 8192, 8192, 20, 80))
    res["cases"].append(case("gemm-8192-duty40b", 8192, 8192, 8192, 40, 60))
    res["cases"].append(case("gemm-8192-duty100", 8192, 8192, 8192, 1000, 0))
json.dump(res, open(f"{out}/duty_cycle.json", "w"), indent=1)
