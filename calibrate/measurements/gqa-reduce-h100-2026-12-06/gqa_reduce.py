"""The kernels of one SDPA backward call (cuDNN), by name, with and without GQA.

For each shape (batch 1, causal, BF16, head dim 128): query heads H, K/V heads Hkv, sequence S.
One forward, then the backward (autograd.grad) profiled 5 times; each kernel's mean duration
(torch.profiler's device time, no events between kernels) is printed as one JSON line per
shape, with the bytes the model gives GQA's reductions: 2 x 2 bytes x (H + Hkv) x S x 128.
"""
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile


def run(h, hkv, s, d=128):
    q = torch.randn(1, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(1, hkv, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(1, hkv, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=hkv != h)
        do = torch.randn_like(o)
        for _ in range(3):
            torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
            torch.cuda.synchronize()
    kernels = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            t = getattr(e, "device_time", None)
            if t is None:
                t = e.cuda_time
            name = e.name[:80]
            kernels.setdefault(name, []).append(t)
    out = {k: {"count": len(v) / 5, "mean_us": sum(v) / len(v)} for k, v in kernels.items()}
    return {"heads": h, "kv_heads": hkv, "seq": s, "head_dim": d,
            "reduce_bytes_model": 2 * 2 * (h + hkv) * s * d, "kernels": out}


def main():
    print(json.dumps({"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                      "cudnn": torch.backends.cudnn.version()}), flush=True)
    for s in (1024, 4096, 8192):
        for h, hkv in ((32, 32), (32, 8), (64, 8), (16, 2)):
            print(json.dumps(run(h, hkv, s)), flush=True)


if __name__ == "__main__":
    main()
