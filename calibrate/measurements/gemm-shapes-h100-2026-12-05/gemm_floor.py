#!/usr/bin/env python3
"""A GEMM kernel's fixed time: its duration against k at fixed m and n, from the profiler's kernel records.

For each (m, n) and each k, runs --reps BF16 GEMMs (x · Wᵀ, BF16 out), each after a short GPU spin so that the cap
does not settle (the spin's SMs draw little power), and takes the median kernel duration the profiler records. Then
fits t = t0 + k / r by least squares over the k at or above --fit-from: t0 is the time a kernel of that m and n
takes beyond its main loop (prologue, epilogue, the last wave's tail), r its rate per unit of k. Prints one JSON
object and a table.
"""
import argparse
import json
import os
import statistics
import tempfile

import torch
from torch.profiler import ProfilerActivity, profile


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--spin-us", type=float, default=200)
    p.add_argument("--fit-from", type=int, default=1024)
    p.add_argument("--json")
    a = p.parse_args()
    bf = torch.bfloat16
    s0, s1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000000)
    s0.record()
    torch.cuda._sleep(20000000)
    s1.record()
    torch.cuda.synchronize()
    cycles = int(a.spin_us * 20000000 / (s0.elapsed_time(s1) * 1e3))
    shapes = [(4096, 2048), (4096, 6144), (4096, 8192), (8192, 8192), (2048, 8192)]
    ks = [256, 512, 1024, 2048, 4096, 8192, 16384]
    rows, fits = [], []
    trace = os.path.join(tempfile.mkdtemp(), "trace.json")
    for m, n in shapes:
        pts = []
        for k in ks:
            x = torch.randn(m, k, device="cuda", dtype=bf)
            w = torch.randn(n, k, device="cuda", dtype=bf)
            for _ in range(3):
                torch.mm(x, w.t())
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(a.reps):
                    torch.cuda._sleep(cycles)
                    torch.mm(x, w.t())
                torch.cuda.synchronize()
            prof.export_chrome_trace(trace)
            with open(trace) as f:
                ev = json.load(f).get("traceEvents", [])
            durs = [e["dur"] for e in ev if e.get("ph") == "X" and e.get("cat") == "kernel"
                    and "spin" not in e.get("name", "").lower()]
            assert len(durs) == a.reps, (len(durs), sorted({e.get("name") for e in ev if e.get("cat") == "kernel"}))
            t = statistics.median(durs) / 1e6
            flops = 2.0 * m * n * k
            rows.append({"m": m, "n": n, "k": k, "s": t, "tflops": flops / t / 1e12})
            pts.append((k, t))
            print(f"m={m:6d} n={n:6d} k={k:6d} {t * 1e6:9.2f} us {flops / t / 1e12:7.1f} TFLOP/s", flush=True)
            del x, w
        fit = [(k, t) for k, t in pts if k >= a.fit_from]
        mk = statistics.mean(k for k, _ in fit)
        mt = statistics.mean(t for _, t in fit)
        slope = sum((k - mk) * (t - mt) for k, t in fit) / sum((k - mk) ** 2 for k, _ in fit)
        t0 = mt - slope * mk
        rate = 2.0 * m * n / slope / 1e12
        fits.append({"m": m, "n": n, "t0_us": t0 * 1e6, "rate_tflops": rate})
        print(f"fit m={m} n={n}: t0 {t0 * 1e6:.2f} us, rate {rate:.1f} TFLOP/s", flush=True)
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "args": vars(a), "rows": rows, "fits": fits}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
