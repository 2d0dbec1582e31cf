#!/usr/bin/env python3
"""GPU time of PyTorch SDPA's kernels, forward and backward, on shapes of the attention grid.

`pytorch_reference.py --attention-table` times each SDPA call between two CUDA events
around one call issued to an idle GPU: the host's time to issue the call (autograd,
PyTorch's cuDNN graph cache, the variant pack) sits inside that interval for short
calls. This script takes the same calls (causal, BF16, enable_gqa, one sequence of `bh`
query heads and bh/g K/V heads, 192 MiB through L2 before each) and adds up the
durations of the GPU work each call ran as torch.profiler records it (kernels, memsets,
copies), median over the repetitions; and, beside it, the event-timed time the attention
table records. One JSON line per shape and phase on stdout.

    python3 calibrate/sdpa_kernel_time.py [--reps 7] [--shapes d,s,bh,g ...]
"""
import argparse
import json
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_reference import sdpa_no_math  # noqa: E402

DEFAULT_SHAPES = [  # (head_dim, seq, batch x heads, GQA group)
    (128, 8192, 128, 1), (128, 8192, 128, 8), (64, 8192, 128, 1), (128, 4096, 64, 1), (128, 4096, 32, 8),
    (128, 2048, 32, 1), (128, 2048, 32, 8), (64, 2048, 128, 4), (128, 1024, 128, 1), (128, 512, 128, 1),
    (64, 1024, 16, 1), (128, 256, 32, 1),
]


def gpu_us(prof):
    total = 0.0
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        total += e.time_range.end - e.time_range.start
    return total


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--shapes", nargs="*", help="d,s,bh,g each")
    a = p.parse_args()
    shapes = [tuple(int(x) for x in s.split(",")) for s in a.shapes] if a.shapes else DEFAULT_SHAPES
    dev = "cuda"
    torch.manual_seed(0)
    flush = torch.empty(96 << 20, device=dev, dtype=torch.uint8)
    flush2 = torch.empty_like(flush)
    for d, s_len, bh, g in shapes:
        q = torch.randn(1, bh, s_len, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(1, bh // g, s_len, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(1, bh // g, s_len, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=g > 1)
        flops = 4.0 * bh * s_len * s_len * d / 2
        with sdpa_no_math():
            out = fwd()
            dout = torch.randn_like(out)
            bwd = lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
            for phase, fn, mult in (("forward", fwd, 1.0), ("backward", bwd, 2.5)):
                for _ in range(3):
                    fn()
                kern, event, names = [], [], set()
                for _ in range(a.reps):
                    flush2.copy_(flush)
                    torch.cuda.synchronize()
                    with profile(activities=[ProfilerActivity.CUDA]) as prof:
                        fn()
                        torch.cuda.synchronize()
                    kern.append(gpu_us(prof) * 1e-6)
                    names |= {e.name[:60] for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}
                    flush2.copy_(flush)
                    ea, eb = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    ea.record()
                    fn()
                    eb.record()
                    torch.cuda.synchronize()
                    event.append(ea.elapsed_time(eb) * 1e-3)
                tk, te = statistics.median(kern), statistics.median(event)
                print(json.dumps({"phase": phase, "head_dim": d, "seq": s_len, "batch_heads": bh, "group": g,
                                  "kernel_s": tk, "event_s": te, "kernel_tflops": mult * flops / tk / 1e12,
                                  "event_tflops": mult * flops / te / 1e12, "kernels": sorted(names)}))
                sys.stdout.flush()
        del q, k, v, out, dout
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
