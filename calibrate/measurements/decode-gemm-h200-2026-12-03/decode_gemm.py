"""Skinny (decode-size) GEMMs on one GPU: y = x W^T for x [M, K] and weights W [N, K],
as a serving engine's linear layers run them, for M (tokens in the batch) from 1 to 512.

Each shape cycles through enough copies of W (>= 1 GiB together) that no weight is in L2
when its GEMM starts, as in a decode step that streams every layer's weights once. Times
are CUDA-graph replays of 64 consecutive GEMMs, median of 15 replays, divided by 64.
Prints one JSON object per line: shape, M, microseconds per GEMM, the weight-streaming
rate (W's bytes / time) and the TFLOP/s."""
import json, statistics, sys
import torch

torch.backends.cuda.matmul.allow_tf32 = False
dev = torch.device("cuda")
dtype = torch.bfloat16
SHAPES = {  # name: (N, K) of the weight, as [out_features, in_features]
    "l8b-qkv": (6144, 4096), "l8b-proj": (4096, 4096), "l8b-up": (28672, 4096), "l8b-down": (4096, 14336),
    "l70b-tp4-qkv": (2560, 8192), "l70b-tp4-proj": (8192, 2048), "l70b-tp4-up": (14336, 8192),
    "l70b-tp4-down": (8192, 7168), "l70b-tp8-up": (7168, 8192), "l70b-tp8-down": (8192, 3584),
}
MS = [1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512]
CALLS = 64

def run(name, n, k):
    wbytes = n * k * 2
    copies = max(4, (1 << 30) // wbytes + 1)
    ws = [torch.randn(n, k, device=dev, dtype=dtype) / 64 for _ in range(copies)]
    out = []
    for m in MS:
        x = torch.randn(m, k, device=dev, dtype=dtype)
        for _ in range(3):
            for i in range(CALLS):
                torch.nn.functional.linear(x, ws[i % copies])
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            with torch.cuda.graph(g):
                for i in range(CALLS):
                    torch.nn.functional.linear(x, ws[i % copies])
        torch.cuda.synchronize()
        times = []
        for _ in range(15):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); g.replay(); b.record(); b.synchronize()
            times.append(a.elapsed_time(b) * 1e3 / CALLS)
        us = statistics.median(times)
        rec = {"shape": name, "m": m, "n": n, "k": k, "us": round(us, 3),
               "weight_gbps": round(wbytes / us / 1e3, 1), "tflops": round(2 * m * n * k / us / 1e6, 2)}
        print(json.dumps(rec), flush=True)
        out.append(rec)
        del g
    del ws
    torch.cuda.empty_cache()
    return out

if __name__ == "__main__":
    print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                      "cuda": torch.version.cuda}), flush=True)
    # a big copy for this GPU's streaming ceiling
    a = torch.empty(1 << 29, device=dev, dtype=torch.float32); b = torch.empty_like(a)
    for _ in range(3): b.copy_(a)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(20): b.copy_(a)
    e1.record(); e1.synchronize()
    print(json.dumps({"copy_gbps": round(20 * 2 * a.numel() * 4 / (e0.elapsed_time(e1) * 1e-3) / 1e9, 1)}), flush=True)
    del a, b
    for name, (n, k) in SHAPES.items():
        run(name, n, k)
