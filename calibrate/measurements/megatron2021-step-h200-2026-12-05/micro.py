#!/usr/bin/env python3
"""The kernels of Megatron-LM 2021's unfused layer one at a time, against a plain copy of the same bytes.

Each row: the kernel's median time over 20 runs (CUDA events, after 5 warm-ups), the bytes it must move (each
input read once, each output written once) and their rate, and the elements it touches. step.py's --fused-softmax
folder, when given, supplies Megatron's upper-triangular softmax. JIT settings are the 2021 commit's (legacy
fuser) unless --jit default.
"""
import argparse
import json
import statistics

import torch

import step

p = argparse.ArgumentParser()
p.add_argument("--fused-softmax", default="")
p.add_argument("--jit", choices=["megatron-2021", "default"], default="megatron-2021")
p.add_argument("--json", default="")
a = p.parse_args()
step.set_jit(a.jit)
if a.fused_softmax:
    step.UpperTriangSoftmax.ext = step.load_softmax(a.fused_softmax)


def timed(fn, n=20, warm=5):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) / 1e3)
    return statistics.median(ts)


rows = []


def row(name, fn, bytes_moved, elements):
    t = timed(fn)
    rows.append({"kernel": name, "seconds": t, "bytes": bytes_moved, "elements": elements,
                 "tb_per_s": bytes_moved / t / 1e12})
    print(f"{name:48s} {t * 1e3:9.3f} ms  {bytes_moved / t / 1e12:6.2f} TB/s  {elements:.3e} elements", flush=True)


h16 = torch.float16
# The stream: a copy of 1 GiB (read + write).
x = torch.randn(2**29, device="cuda", dtype=h16)
y = torch.empty_like(x)
row("copy 1 GiB", lambda: y.copy_(x), 2 * x.numel() * 2, x.numel())
del x, y

for bh, s in [(384, 2048), (96, 2048), (384, 1024), (1536, 512)]:
    sc = torch.randn(bh, s, s, device="cuda", dtype=h16)
    mask = torch.triu(torch.ones(s, s, dtype=torch.bool, device="cuda"), 1)
    n = sc.numel()
    if step.UpperTriangSoftmax.ext is not None:
        ext = step.UpperTriangSoftmax.ext
        pr = ext.forward(sc, 3.0)
        g = torch.randn_like(pr)
        row(f"megatron softmax fwd bh{bh} s{s}", lambda: ext.forward(sc, 3.0), 2 * n * 2, n)
        row(f"megatron softmax bwd bh{bh} s{s}", lambda: ext.backward(g.clone(), pr, 3.0), 3 * n * 2, n)
        gc = g.clone()
        row(f"clone (for bwd's clone) bh{bh} s{s}", lambda: gc.copy_(g), 2 * n * 2, n)
    row(f"torch dropout fwd bh{bh} s{s}", lambda: torch.nn.functional.dropout(sc, 0.1, True), n * 5, n)
    del sc, mask

for rows_, cols in [(16 * 2048, 4 * 2304), (4 * 2048, 4 * 4096), (2048, 4 * 12288 // 8)]:
    yv = torch.randn(rows_, cols, device="cuda", dtype=h16)
    b = torch.randn(cols, device="cuda", dtype=h16)
    g = torch.randn_like(yv)
    n = yv.numel()
    row(f"jit bias_gelu fwd {rows_}x{cols}", lambda: step.bias_gelu(b, yv), 2 * n * 2, n)
    row(f"jit bias_gelu bwd {rows_}x{cols}", lambda: step.bias_gelu_back(g, b, yv), 3 * n * 2, n)
    row(f"eager gelu(tanh) fwd {rows_}x{cols}",
        lambda: torch.nn.functional.gelu(yv + b, approximate="tanh"), 4 * n * 2, n)
    del yv, g

for sq, bsz, heads, hn in [(2048, 16, 24, 96), (2048, 4, 32, 128)]:
    h = heads * hn
    r = torch.randn(sq, bsz, h, device="cuda", dtype=h16)
    bias = torch.randn(h, device="cuda", dtype=h16)
    res = torch.randn_like(r)
    n = r.numel()
    row(f"jit bias_dropout_add {sq}x{bsz}x{h}", lambda: step.bias_dropout_add(r, bias.expand_as(r), res, 0.1),
        3 * n * 2, n)
    # The split's backward: three strided gradients into one [s, b, np, 3*hn] tensor.
    parts = [torch.randn(bsz * heads, sq, hn, device="cuda", dtype=h16).transpose(0, 1).view(sq, bsz, heads, hn)
             for _ in range(3)]
    row(f"cat of split grads {sq}x{bsz}x{heads}x3*{hn}", lambda: torch.cat(parts, dim=-1), 2 * 3 * n * 2, 3 * n)
    # The context's permute(2, 0, 1, 3).contiguous().
    c = torch.randn(bsz, heads, sq, hn, device="cuda", dtype=h16)
    row(f"context permute copy {sq}x{bsz}x{heads}x{hn}", lambda: c.permute(2, 0, 1, 3).contiguous(), 2 * n * 2, n)
    # Bias gradients: the sum over s*b rows.
    gg = torch.randn(sq * bsz, 4 * h, device="cuda", dtype=h16)
    row(f"bias grad sum {sq * bsz}x{4 * h}", lambda: gg.sum(dim=0), gg.numel() * 2, gg.numel())
    del r, res, parts, c, gg

if a.json:
    with open(a.json, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "jit": a.jit, "rows": rows}, f,
                  indent=1)
