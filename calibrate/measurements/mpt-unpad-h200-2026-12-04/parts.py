"""The parts of MPT's unpad / pad path at the MPT-1B shape (micro-batch 12 x 2048 tokens, hidden
2048), each timed alone on one H200: the row gather (bert_padding's index_first_axis), its
backward (zeros + scatter_), pad_input (zeros + index_put) and its backward (a row gather),
beside a plain copy of the same bytes; and the host synchronizations of unpad_input
(nonzero, max().item()) as GPU time: N x [GEMM, unpad_input(q)] against N x [GEMM, the gather
alone], so the difference is what the mask arithmetic and its two synchronizations cost the
GPU per call. Prints JSON lines."""
import json, statistics, time
import torch
import torch.nn.functional as F

dev = 'cuda'
b, s, h = 12, 2048, 2048
qkv = torch.randn(b, s, 3 * h, device=dev, dtype=torch.bfloat16)
q = qkv[..., :h]
mask = torch.ones(b, s, device=dev, dtype=torch.bool)
idx = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
rows = q.reshape(-1, h)
g = torch.randn(b * s, h, device=dev, dtype=torch.bfloat16)
A = torch.randn(8192, 2048, device=dev, dtype=torch.bfloat16)
B = torch.randn(2048, 8192, device=dev, dtype=torch.bfloat16)
U = b * s * h * 2


def gather():
    return torch.gather(rows, 0, idx.unsqueeze(1).expand(-1, h))


def scatter_back():
    gi = torch.zeros(b * s, h, device=dev, dtype=torch.bfloat16)
    gi.scatter_(0, idx.unsqueeze(1).expand(-1, h), g)
    return gi


def pad():
    out = torch.zeros(b * s, h, device=dev, dtype=torch.bfloat16)
    out[idx] = g
    return out


def pad_back():
    return g[idx]


def copy():
    return rows.contiguous()


def unpad_full():
    m = torch.ones_like(qkv[:, :, 0], dtype=torch.bool)
    seqlens = m.sum(dim=-1, dtype=torch.int32)
    ix = torch.nonzero(m.flatten(), as_tuple=False).flatten()
    mx = seqlens.max().item()
    cu = F.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    return torch.gather(rows, 0, ix.unsqueeze(1).expand(-1, h)), cu, mx


def timed(fn, n=10, reps=15):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts, ws = [], []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        e0.record()
        for _ in range(n):
            fn()
        e1.record()
        torch.cuda.synchronize()
        ws.append((time.perf_counter() - t0) / n)
        ts.append(e0.elapsed_time(e1) / 1e3 / n)
    return statistics.median(ts), statistics.median(ws)


print(json.dumps({'torch': torch.__version__, 'gpu': torch.cuda.get_device_name(), 'U_bytes': U}), flush=True)
for name, fn, moved in [('copy', copy, 2 * U), ('gather', gather, 2 * U), ('scatter_back', scatter_back, 3 * U),
                        ('pad', pad, 3 * U), ('pad_back', pad_back, 2 * U)]:
    t, w = timed(fn)
    print(json.dumps({'part': name, 'gpu_s': t, 'wall_s': w, 'bytes': moved, 'GBps': moved / t / 1e9}), flush=True)
for name, fn in [('gemm+gather', lambda: (A @ B, gather())), ('gemm+unpad_input', lambda: (A @ B, unpad_full())),
                 ('gemm', lambda: A @ B)]:
    t, w = timed(fn)
    print(json.dumps({'part': name, 'gpu_s': t, 'wall_s': w}), flush=True)
