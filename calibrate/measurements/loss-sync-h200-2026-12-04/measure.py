"""The GPU time a per-micro-batch loss check costs in a PyTorch training step.

Megatron-LM's loss_func checks each micro-batch's loss for NaN before the backward
(`assert not loss[0].isnan()`, later the rerun state machine's validate_result): the host
waits for the forward to finish, then launches the backward. This times a step of
micro-batches through a stack of MLP blocks with and without that check, alternating the
two, and reports the difference per micro-batch (the idle the wait leaves on the GPU).

usage: python3 measure.py [--hidden 4096] [--tokens 4096] [--layers 4] [--micro-batches 8] [--steps 30]
"""
import argparse
import json
import statistics

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--micro-batches", type=int, default=8)
    ap.add_argument("--steps", type=int, default=30)
    a = ap.parse_args()
    torch.manual_seed(0)
    dev = "cuda"
    blocks = torch.nn.Sequential(*[torch.nn.Sequential(
        torch.nn.LayerNorm(a.hidden), torch.nn.Linear(a.hidden, 4 * a.hidden), torch.nn.GELU(),
        torch.nn.Linear(4 * a.hidden, a.hidden)) for _ in range(a.layers)]).to(dev, torch.bfloat16)
    xs = [torch.randn(a.tokens, a.hidden, device=dev, dtype=torch.bfloat16) for _ in range(a.micro_batches)]

    def step(check):
        for x in xs:
            loss = blocks(x).float().pow(2).mean()
            if check:
                assert not loss.isnan()
            loss.backward()

    for check in (False, True, False, True):  # warm up both paths
        step(check)
    torch.cuda.synchronize()
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
        "layers": a.layers, "micro_batches": a.micro_batches, "steps": a.steps,
        "step_s_without_check": off, "step_s_with_check": on,
        "check_s_per_micro_batch": (on - off) / a.micro_batches,
        "per_pair_difference_s_per_micro_batch": sorted((b - c) / a.micro_batches
                                                        for b, c in zip(times[True], times[False])),
    }, indent=1))


if __name__ == "__main__":
    main()
