"""Mixture-of-experts GEMMs on one GPU, as a serving engine's MoE layer runs them: one grouped
GEMM over the experts a batch reaches (PyTorch's torch._grouped_mm, CUTLASS's grouped kernel on
Hopper), against the same experts' GEMMs launched one by one (torch.mm). Shapes of Mixtral
8x7B's experts at TP 1 and TP 8 (BF16): the gate-and-up matrix (N 2 x 14,336 / tp, K 4,096)
and the down matrix (N 4,096, K 14,336 / tp). T tokens choosing 2 of 8 experts spread their
T x 2 rows evenly over the experts they reach, min(8, 2T) of them. Weights are cycled through
copies (>= 2 GiB together) so none is in L2 when its GEMM starts. Times are CUDA-graph replays
of 16 calls, median of 11, divided by 16. Prints one JSON object per line."""
import json, statistics
import torch

dev = torch.device("cuda")
dt = torch.bfloat16
CALLS = 16
SHAPES = {"mixtral-tp1-in": (28672, 4096), "mixtral-tp1-out": (4096, 14336),
          "mixtral-tp8-in": (3584, 4096), "mixtral-tp8-out": (4096, 1792)}
TOKENS = [1, 4, 16, 64, 256, 1024, 4096]
E, TOPK = 8, 2


def timed(fn):
    for _ in range(3):
        fn(0)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        with torch.cuda.graph(g):
            for i in range(CALLS):
                fn(i)
    torch.cuda.synchronize()
    ts = []
    for _ in range(11):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / CALLS)
    return statistics.median(ts)


def main():
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                      "grouped_mm": hasattr(torch, "_grouped_mm")}), flush=True)
    for name, (n, k) in SHAPES.items():
        wbytes = E * n * k * 2
        copies = max(2, (2 << 30) // wbytes + 1)
        ws = [torch.randn(E, k, n, device=dev, dtype=dt) / 64 for _ in range(copies)]  # [G, K, N]
        for t in TOKENS:
            reached = min(E, TOPK * t)
            rows = TOPK * t
            per = [rows // reached + (1 if i < rows % reached else 0) for i in range(reached)]
            per = per + [0] * (E - reached)
            x = torch.randn(rows, k, device=dev, dtype=dt)
            offs = torch.tensor([sum(per[:i + 1]) for i in range(E)], device=dev, dtype=torch.int32)
            rec = {"shape": name, "tokens": t, "rows": rows, "reached": reached, "n": n, "k": k}
            try:
                rec["grouped_us"] = round(timed(lambda i: torch._grouped_mm(x, ws[i % copies], offs=offs)), 3)
            except Exception as e:  # noqa: BLE001 - report and go on
                rec["grouped_error"] = str(e).splitlines()[0][:120]
            starts = [sum(per[:i]) for i in range(E)]

            def loop(i):
                w = ws[i % copies]
                for j in range(reached):
                    torch.mm(x[starts[j]:starts[j] + per[j]], w[j])
            rec["loop_us"] = round(timed(loop), 3)
            print(json.dumps(rec), flush=True)
        del ws
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
