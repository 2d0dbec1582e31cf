"""A grouped GEMM over experts, its rows spread as a router spreads them against spread evenly
(one GPU). Mixtral 8x7B's expert matrices at TP 1 and TP 8 in BF16 (gate-and-up: N 2 x 14,336 /
tp, K 4,096; down: N 4,096, K 14,336 / tp) through PyTorch's grouped kernel (torch._grouped_mm,
CUTLASS's grouped GEMM on Hopper). T tokens each choose 2 of the 8 experts, uniformly and
without repeat (torch.randperm per token, seeded): each expert's rows are its count of them.
Timed: the even split (2T / 8 rows an expert) and 12 routed draws, each a CUDA-graph replay of
16 calls, median of 9, over 16; the weights cycled through copies (>= 2 GiB) so none is in L2.
Prints one JSON object per line: the even time, the routed draws' median, their counts."""
import json, statistics
import torch

dev = torch.device("cuda")
dt = torch.bfloat16
CALLS, DRAWS = 16, 12
SHAPES = {"mixtral-tp1-in": (28672, 4096), "mixtral-tp1-out": (4096, 14336),
          "mixtral-tp8-in": (3584, 4096), "mixtral-tp8-out": (4096, 1792)}
TOKENS = [64, 256, 512, 1024, 2048, 4096, 8192]
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
    for _ in range(9):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); g.replay(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / CALLS)
    return statistics.median(ts)


def counts_of(t, gen):
    c = [0] * E
    choice = torch.stack([torch.randperm(E, generator=gen)[:TOPK] for _ in range(t)]).flatten().tolist()
    for e in choice:
        c[e] += 1
    return c


def main():
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__}), flush=True)
    gen = torch.Generator().manual_seed(20261207)
    for name, (n, k) in SHAPES.items():
        wbytes = E * n * k * 2
        copies = max(2, (2 << 30) // wbytes + 1)
        ws = [torch.randn(E, k, n, device=dev, dtype=dt) / 64 for _ in range(copies)]  # [G, K, N]
        for t in TOKENS:
            rows = TOPK * t
            x = torch.randn(rows, k, device=dev, dtype=dt)

            def run(per):
                offs = torch.tensor([sum(per[:i + 1]) for i in range(E)], device=dev, dtype=torch.int32)
                return timed(lambda i: torch._grouped_mm(x, ws[i % copies], offs=offs))

            even = [rows // E + (1 if i < rows % E else 0) for i in range(E)]
            draws = [counts_of(t, gen) for _ in range(DRAWS)]
            routed = [run(c) for c in draws]
            print(json.dumps({"shape": name, "tokens": t, "rows": rows, "n": n, "k": k,
                              "even_us": round(run(even), 3), "routed_us": round(statistics.median(routed), 3),
                              "routed_min_us": round(min(routed), 3), "routed_max_us": round(max(routed), 3),
                              "counts": draws}), flush=True)
        del ws
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
