"""The GPU time a per-micro-batch loss check costs, against the size of the backward's autograd graph.

After `assert not loss.isnan()` the host has waited for the forward; `loss.backward()` then walks the whole graph
once to count each node's dependencies (the engine's GraphTask set-up) before its first node runs, and the drained
GPU idles through that walk. This times a step of micro-batches through a stack of bf16 MLP blocks (LayerNorm,
h -> 4h, GELU, 4h -> h) with and without the check, alternated, at a given depth, and stamps on the host the time from
the check's return to the engine's first node (a pre-hook on the loss's grad_fn). The same step as
../loss-sync-h200-2026-12-04/measure.py, with the graph's node count and that stamp added.

usage: python3 release.py [--hidden 4096] [--tokens 4096] [--layers 4] [--micro-batches 8] [--steps 10]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mcore-step-h200"))
from mcore_step import count_nodes  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--micro-batches", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    a = ap.parse_args()
    torch.manual_seed(0)
    dev = "cuda"
    blocks = torch.nn.Sequential(*[torch.nn.Sequential(
        torch.nn.LayerNorm(a.hidden), torch.nn.Linear(a.hidden, 4 * a.hidden), torch.nn.GELU(),
        torch.nn.Linear(4 * a.hidden, a.hidden)) for _ in range(a.layers)]).to(dev, torch.bfloat16)
    xs = [torch.randn(a.tokens, a.hidden, device=dev, dtype=torch.bfloat16) for _ in range(a.micro_batches)]
    nodes = count_nodes(blocks(xs[0]).float().pow(2).mean().grad_fn)
    engine = []
    stamp = {}

    def step(check):
        for x in xs:
            loss = blocks(x).float().pow(2).mean()
            if check:
                loss.grad_fn.register_prehook(lambda g: stamp.__setitem__("engine", time.perf_counter()))
                assert not loss.isnan()
                h = time.perf_counter()
                loss.backward()
                engine.append(stamp["engine"] - h)
            else:
                loss.backward()

    for check in (False, True, False, True):  # warm up both paths
        step(check)
    torch.cuda.synchronize()
    engine.clear()
    times = {False: [], True: []}
    for _ in range(a.steps):
        for check in (False, True):  # alternated, so drift falls on both alike
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            step(check)
            end.record()
            torch.cuda.synchronize()
            times[check].append(start.elapsed_time(end) * 1e-3)
    off, on = statistics.median(times[False]), statistics.median(times[True])
    print(json.dumps({
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "hidden": a.hidden, "tokens": a.tokens,
        "layers": a.layers, "micro_batches": a.micro_batches, "steps": a.steps, "autograd_nodes": nodes,
        "step_s_without_check": off, "step_s_with_check": on,
        "check_s_per_micro_batch": (on - off) / a.micro_batches,
        "per_pair_difference_s_per_micro_batch": sorted((b - c) / a.micro_batches
                                                        for b, c in zip(times[True], times[False])),
        "host_engine_start_s": statistics.median(engine),
        "host_engine_start_s_quartiles": statistics.quantiles(engine, n=4),
    }, indent=1))


if __name__ == "__main__":
    main()
