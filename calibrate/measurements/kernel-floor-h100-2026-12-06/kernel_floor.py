"""Small kernels back to back: what each costs the GPU when the host keeps the queue full.

Four ways to time the same sequence of N kernels of one kind and size:
  ev     each kernel between its own two CUDA events, queued behind a spin kernel
         (how `clustersim calibrate` and the real backend time an op)
  seq    the N kernels back to back, queued behind a spin kernel, one event pair
         around them all (a training step's stream: no events between kernels)
  graph  the same N kernels captured in a CUDA graph, the replay queued behind a spin
  host   the N kernels issued to an idle GPU (the host's issue rate bounds them)

Kinds: `add` (c = a + b, BF16, three tensors of `bytes` each), `fill` (c.zero_()),
`mm` (a square BF16 product of side n), and `mix` (add and mm in turn, as a layer's
backward alternates small GEMMs and elementwise kernels). Operands rotate through
enough buffers to leave L2 (50 MiB on an H100) from 1 MiB up.

One JSON line per (kind, size, mode): seconds a kernel, the median of 7 repeats.
"""
import json
import sys
import time

import torch


def spin_cycles(seconds):
    return int(seconds * torch.cuda.get_device_properties(0).clock_rate * 1e3)  # clock_rate in kHz


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


def make(kind, size, n_buf):
    dev = "cuda"
    if kind in ("add", "fill"):
        el = max(1, size // 2)
        bufs = [[torch.randn(el, device=dev, dtype=torch.bfloat16) for _ in range(3)] for _ in range(n_buf)]
        if kind == "add":
            return [lambda b=b: torch.add(b[0], b[1], out=b[2]) for b in bufs]
        return [lambda b=b: b[2].zero_() for b in bufs]
    if kind == "mm":
        bufs = [[torch.randn(size, size, device=dev, dtype=torch.bfloat16) for _ in range(3)] for _ in range(n_buf)]
        return [lambda b=b: torch.mm(b[0], b[1], out=b[2]) for b in bufs]
    if kind == "mix":  # size = the GEMM side; the add moves side^2 elements
        bufs = [[torch.randn(size, size, device=dev, dtype=torch.bfloat16) for _ in range(3)] for _ in range(n_buf)]
        ops = []
        for b in bufs:
            ops.append(lambda b=b: torch.mm(b[0], b[1], out=b[2]))
            ops.append(lambda b=b: torch.add(b[0], b[1], out=b[2]))
        return ops
    raise ValueError(kind)


def time_modes(ops, n, spin_s):
    seq = [ops[i % len(ops)] for i in range(n)]
    for f in seq[: min(n, 50)]:
        f()
    torch.cuda.synchronize()
    out = {}
    cyc = spin_cycles(spin_s)
    # ev: each kernel between its own events, queued
    evs = [torch.cuda.Event(enable_timing=True) for _ in range(2 * n)]
    r = []
    for _ in range(7):
        torch.cuda._sleep(cyc)
        h0 = time.perf_counter()
        for i, f in enumerate(seq):
            evs[2 * i].record()
            f()
            evs[2 * i + 1].record()
        issue = time.perf_counter() - h0
        torch.cuda.synchronize()
        r.append(sum(evs[2 * i].elapsed_time(evs[2 * i + 1]) for i in range(n)) * 1e-3 / n)
        gaps = [evs[2 * i - 1].elapsed_time(evs[2 * i]) * 1e-3 for i in range(1, n)]
    out["ev"] = median(r)
    out["ev_gap"] = median(gaps)
    out["ev_span"] = evs[0].elapsed_time(evs[-1]) * 1e-3 / n
    out["issue_ev"] = issue / n
    # seq: back to back, one event pair
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    r = []
    for _ in range(7):
        torch.cuda._sleep(cyc)
        a.record()
        h0 = time.perf_counter()
        for f in seq:
            f()
        issue = time.perf_counter() - h0
        b.record()
        torch.cuda.synchronize()
        r.append(a.elapsed_time(b) * 1e-3 / n)
    out["seq"] = median(r)
    out["issue_seq"] = issue / n
    out["spin_s"] = spin_s
    # graph
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        with torch.cuda.graph(g, stream=s):
            for f in seq:
                f()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    r = []
    for _ in range(7):
        torch.cuda._sleep(cyc)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        r.append(a.elapsed_time(b) * 1e-3 / n)
    out["graph"] = median(r)
    del g
    # host: idle GPU
    r = []
    for _ in range(7):
        torch.cuda.synchronize()
        a.record()
        for f in seq:
            f()
        b.record()
        torch.cuda.synchronize()
        r.append(a.elapsed_time(b) * 1e-3 / n)
    out["host"] = median(r)
    return out


def main():
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
    p = torch.cuda.get_device_properties(0)
    print(json.dumps({"device": p.name, "sms": p.multi_processor_count, "torch": torch.__version__,
                      "cuda": torch.version.cuda}), flush=True)
    plan = []
    for size in [2 << 10, 8 << 10, 32 << 10, 128 << 10, 512 << 10, 2 << 20, 8 << 20, 32 << 20, 128 << 20]:
        plan.append(("add", size))
    for size in [2 << 10, 128 << 10, 2 << 20, 32 << 20]:
        plan.append(("fill", size))
    for side in [64, 128, 256, 512, 1024, 2048]:
        plan.append(("mm", side))
    for side in [64, 256, 1024]:
        plan.append(("mix", side))
    for kind, size in plan:
        per_buf = size * 3 if kind in ("add", "fill") else size * size * 2 * 3
        n_buf = max(1, min(64, (256 << 20) // max(per_buf, 1))) if per_buf >= (1 << 20) // 4 else 4
        ops = make(kind, size, n_buf)
        n = 200 if per_buf < (8 << 20) else 60
        # the spin outlasts the host's issue of n kernels with their events (~10 us each)
        spin_s = max(0.02, 25e-6 * n)
        res = time_modes(ops, n, spin_s)
        res.update({"kind": kind, "size": size, "n": n, "buffers": n_buf})
        print(json.dumps(res), flush=True)
        del ops
        torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
