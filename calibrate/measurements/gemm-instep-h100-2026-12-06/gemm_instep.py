#!/usr/bin/env python3
"""Why a training step's GEMMs outrun the same shapes timed alone.

In plain-PyTorch steps of a GPT at hidden 2,048 and 4,096 tokens (calibrate/measurements/pytorch/run6), the twelve
GEMMs of a layer (QKV, projection, FC1, FC2: fprop, dgrad, wgrad) run at ~780 TFLOP/s at 0.92 of the boost clock,
where the same shapes timed alone by torch.mm reach 650-790 (gemm-shapes-h100-2026-12-05). This times the four fprop
shapes and the layer's twelve products several ways, each queued behind a spin kernel so the host runs ahead:

  mm       torch.mm(x, w.t()), 20 calls on the same operands (as gemm_shapes.py)
  linear   F.linear(x, w, bias), 20 calls (the step's call: cuBLASLt with a bias epilogue)
  rotate   F.linear over 8 operand sets in turn (L2-cold operands, as in a step)
  single   one F.linear after 30 ms idle
  layer    the layer's 12 products in the step's order (forward 4, then dgrad and wgrad backwards), 24 layers
           back to back on distinct operands: one micro-batch's GEMM work
  layer+mem  the same with a 64 MiB add between products, as the step's elementwise kernels sit between them

For each: the median per-call (per-layer) time of 7 trials, TFLOP/s, and the median SM clock and power sampled every
5 ms during the trials (torch.cuda.clock_rate / power_draw, NVML). Also the kernel each call launches. JSON lines.
    python3 gemm_instep.py > out/gemm-instep.jsonl
"""
import json
import statistics
import threading
import time

import torch
import torch.nn.functional as F

BF = torch.bfloat16
T, H = 4096, 2048
SPIN = 4_000_000


class Sampler:
    def __init__(self):
        self.sm, self.w, self._stop = [], [], threading.Event()

    def __enter__(self):
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.sm.append(float(torch.cuda.clock_rate()))
            self.w.append(float(torch.cuda.power_draw()) / 1000.0)
            self._stop.wait(0.005)

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


def timed(fn, calls, trials=7, idle_s=0.0):
    fn()
    torch.cuda.synchronize()
    ts = []
    with Sampler() as s:
        for _ in range(trials):
            if idle_s:
                time.sleep(idle_s)
            torch.cuda._sleep(SPIN)
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for i in range(calls):
                fn(i)
            b.record()
            torch.cuda.synchronize()
            ts.append(a.elapsed_time(b) / 1e3 / calls)
    return statistics.median(ts), statistics.median(s.sm) if s.sm else 0, statistics.fmean(s.w) if s.w else 0


def kernels(fn):
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(0)
        torch.cuda.synchronize()
    return sorted({e.name[:90] for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})


def emit(**kw):
    print(json.dumps(kw), flush=True)


def main():
    torch.manual_seed(0)
    emit(gpu=torch.cuda.get_device_name(), torch=torch.__version__)
    shapes = [("qkv", 3 * H, H), ("proj", H, H), ("fc1", 4 * H, H), ("fc2", H, 4 * H)]
    for name, n, k in shapes:
        flops = 2.0 * T * n * k
        xs = [torch.randn(T, k, device="cuda", dtype=BF) for _ in range(8)]
        ws = [torch.randn(n, k, device="cuda", dtype=BF) * 0.02 for _ in range(8)]
        b = torch.zeros(n, device="cuda", dtype=BF)
        modes = {
            "mm": (lambda i=0: torch.mm(xs[0], ws[0].t()), 20, 0.0),
            "linear": (lambda i=0: F.linear(xs[0], ws[0], b), 20, 0.0),
            "rotate": (lambda i=0: F.linear(xs[i % 8], ws[i % 8], b), 20, 0.0),
            "single": (lambda i=0: F.linear(xs[1], ws[1], b), 1, 0.03),
        }
        for mode, (fn, calls, idle) in modes.items():
            t, clk, w = timed(fn, calls, idle_s=idle)
            emit(shape=name, m=T, n=n, k=k, mode=mode, s=t, tflops=flops / t / 1e12, sm_mhz=clk, power_w=w,
                 kernels=kernels(fn))
        del xs, ws, b
    # One micro-batch's GEMMs: 24 layers of 12 products on distinct operands.
    L = 24
    layer = []
    for _ in range(L):
        layer.append({nm: (torch.randn(n, k, device="cuda", dtype=BF) * 0.02) for nm, n, k in shapes})
    acts = {nm: torch.randn(T, k, device="cuda", dtype=BF) for nm, n, k in shapes}
    grads = {nm: torch.randn(T, n, device="cuda", dtype=BF) for nm, n, k in shapes}
    bias = {nm: torch.zeros(n, device="cuda", dtype=BF) for nm, n, k in shapes}
    pad_a = torch.randn(32 << 20, device="cuda", dtype=BF)  # 64 MiB
    pad_b = torch.empty_like(pad_a)
    layer_flops = sum(3 * 2.0 * T * n * k for _, n, k in shapes)

    def micro_batch(i=0, mem=False):
        for ly in layer:
            for nm, _, _ in shapes:
                F.linear(acts[nm], ly[nm], bias[nm])
                if mem:
                    torch.add(pad_a, 1.0, out=pad_b)
        for ly in reversed(layer):
            for nm, _, _ in reversed(shapes):
                torch.mm(grads[nm], ly[nm])          # dgrad
                torch.mm(grads[nm].t(), acts[nm])    # wgrad
                if mem:
                    torch.add(pad_a, 1.0, out=pad_b)
                    torch.add(pad_a, 1.0, out=pad_b)

    from torch.profiler import profile, ProfilerActivity
    for mode, mem in (("layer", False), ("layer+mem", True)):
        t, clk, w = timed(lambda i=0: micro_batch(i, mem), 1, trials=7)
        # The GEMM kernels' own time in one more micro-batch, profiled right after (the adds apart).
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            micro_batch(0, mem)
            torch.cuda.synchronize()
        k = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        gemm_us = sum(e.time_range.elapsed_us() for e in k if "add" not in e.name.lower()
                      and "elementwise" not in e.name.lower())
        emit(shape="layer", mode=mode, s=t / L, gemm_kernels_s=gemm_us * 1e-6 / L,
             tflops=layer_flops / (gemm_us * 1e-6 / L) / 1e12, sm_mhz=clk, power_w=w,
             kernels=sorted({e.name[:90] for e in k}))


if __name__ == "__main__":
    main()
