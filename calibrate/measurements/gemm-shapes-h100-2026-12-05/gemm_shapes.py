#!/usr/bin/env python3
"""cuBLAS's rate on the GEMMs of a GPT layer at 4,096 tokens, as Megatron-Core runs them.

For each hidden size (2,048: the Megatron-LM README's 1.7B row; 4,096) and each linear layer (QKV, projection, FC1,
FC2 of a 4h GELU MLP) it times the three products of a training step: fprop (x · Wᵀ, BF16 out), dgrad (dy · W, BF16
out) and wgrad (dyᵀ · x accumulated into an FP32 main gradient, as Transformer Engine's gradient-accumulation fusion
does; `torch.addmm(..., out_dtype=torch.float32)`), plus the output layer over a 131,072 vocabulary. Each is timed by
CUDA events over --reps launches after --warmup, the median of --trials; prints one JSON object.
"""
import argparse
import json
import statistics

import torch


def timed(fn, reps, warmup, trials):
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(trials):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b) / 1e3 / reps)
    return statistics.median(out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--vocab", type=int, default=131072)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--json")
    a = p.parse_args()
    bf = torch.bfloat16
    m = a.tokens
    rows = []
    layers = []
    for h in (2048, 4096):
        layers += [(f"h{h}-qkv", 3 * h, h), (f"h{h}-proj", h, h), (f"h{h}-fc1", 4 * h, h), (f"h{h}-fc2", h, 4 * h)]
    layers += [("h2048-logits", a.vocab, 2048)]
    for name, n, k in layers:  # a linear of k inputs and n outputs over m tokens
        x = torch.randn(m, k, device="cuda", dtype=bf)
        w = torch.randn(n, k, device="cuda", dtype=bf)
        dy = torch.randn(m, n, device="cuda", dtype=bf)
        main_grad = torch.zeros(n, k, device="cuda", dtype=torch.float32)
        flops = 2.0 * m * n * k
        t_f = timed(lambda: torch.mm(x, w.t()), a.reps, a.warmup, a.trials)
        t_d = timed(lambda: torch.mm(dy, w), a.reps, a.warmup, a.trials)
        try:
            t_w = timed(lambda: torch.addmm(main_grad, dy.t(), x, out_dtype=torch.float32, out=main_grad), a.reps,
                        a.warmup, a.trials)
        except Exception as e:  # noqa: BLE001
            print("addmm out_dtype unavailable:", e)
            t_w = float("nan")
        t_wb = timed(lambda: torch.mm(dy.t(), x), a.reps, a.warmup, a.trials)
        for kind, mm, nn, kk, t in (("fprop", m, n, k, t_f), ("dgrad", m, k, n, t_d),
                                    ("wgrad-fp32-acc", n, k, m, t_w), ("wgrad-bf16", n, k, m, t_wb)):
            rows.append({"layer": name, "kind": kind, "m": mm, "n": nn, "k": kk, "s": t, "tflops": flops / t / 1e12})
            print(f"{name:14s} {kind:15s} m={mm:6d} n={nn:6d} k={kk:6d} {t * 1e6:9.1f} us {flops / t / 1e12:7.1f} TFLOP/s",
                  flush=True)
        del x, w, dy, main_grad
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "args": vars(a), "rows": rows}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
