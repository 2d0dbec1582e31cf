#!/usr/bin/env python3
"""The SM clock at each GEMM of a plain-PyTorch training step, read by the GPU itself.

A probe is two spins of torch.cuda._sleep (one thread spinning on clock64), of P and 4P SM cycles, each between
two CUDA events on the step's stream. A spin's time between its events is its cycles over the SM clock of that
moment plus a fixed cost (the launch between the events), so 3P over the difference of the two times reads the clock
at the probe's place in the step within tens of microseconds, where nvidia-smi reads a 100 ms sample. (One spin's
P / t alone reads 15-20 % low.)
Probes run before each linear layer's forward (a GEMM is next) and before its backward (its dgrad and wgrad are
next) in every --every-th layer, and before and after the gradient clipping and the optimizer (memory-bound work).
The step is calibrate/pytorch_reference.py's (the same model, data and recipe), run under its own arguments:

    python3 clock_probe.py --scenario-json ../pytorch/run3/pt-gpt3-1.3b-1xh200.json --iterations 10 --warmup 5

prints one JSON line: the probes' clocks (MHz) by place, the probe's reading while a copy stream keeps the board busy
below its limit (the boost clock, as a check), the steps' time
with and without probes, and nvidia-smi's median over the probed steps.
"""
import json
import os
import statistics
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import pytorch_reference as pr  # noqa: E402

P = 20_000  # cycles: ~10 us at 1,980 MHz; the long spin 4P
EVERY = 4


def probed_train(args):
    cfg = pr.resolve_config(args)
    torch.manual_seed(args.seed)
    dev = torch.device("cuda")
    gqa_mode = pr.choose_gqa_mode(cfg, args.gqa)
    with dev:
        model = pr.Transformer(cfg, gqa_mode)
    pr.init_weights(model)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    mb, nmb, s, V = cfg["micro_batch"], cfg["micro_batches"], cfg["seq_len"], cfg["vocab"]
    data = [(torch.randint(0, V, (mb, s), device=dev), torch.randint(0, V, (mb, s), device=dev)) for _ in range(nmb)]
    probes = []  # (place, [events of the short spin], [events of the long spin])
    on = [False]

    def probe(place):
        if not on[0]:
            return
        probes.append((place, spins()))

    layers = [m for m in model.modules() if isinstance(m, pr.Block)]
    for i, blk in enumerate(layers):
        if i % EVERY:
            continue
        for name, lin in blk.named_modules():
            if isinstance(lin, nn.Linear):
                lin.register_forward_pre_hook(lambda m, inp, n=name: probe("fwd-" + n))
                lin.register_full_backward_pre_hook(lambda m, g, n=name: probe("bwd-" + n))

    def step():
        for tokens, labels in data:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(tokens, labels) / nmb
            loss.backward()
        probe("before-clip")
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        probe("before-adamw")
        opt.step()
        probe("after-adamw")
        opt.zero_grad(set_to_none=True)

    def timed_steps(n):
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        for a, b in ev:
            a.record()
            step()
            b.record()
        torch.cuda.synchronize()
        return statistics.median(a.elapsed_time(b) / 1e3 for a, b in ev)

    def streaming_reading():
        import time
        time.sleep(1.0)
        # The board busy but far from its limit: a 1 GiB copy stream keeps the clock up.
        x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
        y = torch.empty_like(x)
        out = []
        for _ in range(9):
            for _ in range(20):
                y.copy_(x)
            ev = spins()
            torch.cuda.synchronize()
            out.append(mhz(ev))
            time.sleep(0.05)
        del x, y
        return statistics.median(out)

    with pr.sdpa_no_math():
        streaming_mhz = streaming_reading()
        for _ in range(cfg["warmup"]):
            step()
        plain = timed_steps(cfg["iterations"])
        on[0] = True
        with pr.ClockSampler() as smi:
            probed = timed_steps(cfg["iterations"])
        on[0] = False
    by = {}
    for place, ev in probes:
        by.setdefault(place, []).append(mhz(ev))
    out = {"name": cfg["name"], "device": torch.cuda.get_device_name(), "probe_cycles": [P, 4 * P], "every": EVERY,
           "streaming_probe_mhz": streaming_mhz, "step_s": plain, "probed_step_s": probed,
           "smi": dict(smi.metrics()),
           "probe_mhz": {k: {"n": len(v), "median": statistics.median(v), "p10": sorted(v)[len(v) // 10],
                             "p90": sorted(v)[(9 * len(v)) // 10]} for k, v in sorted(by.items())}}
    print(json.dumps(out), flush=True)


def spins():
    """The probe: spins of P and 4P cycles, each between two events on the current stream."""
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    ev[0].record()
    torch.cuda._sleep(P)
    ev[1].record()
    ev[2].record()
    torch.cuda._sleep(4 * P)
    ev[3].record()
    return ev


def mhz(ev):
    short, long = ev[0].elapsed_time(ev[1]), ev[2].elapsed_time(ev[3])  # ms
    return 3 * P / ((long - short) * 1e-3) / 1e6


pr.train = probed_train
if __name__ == "__main__":
    pr.main()
