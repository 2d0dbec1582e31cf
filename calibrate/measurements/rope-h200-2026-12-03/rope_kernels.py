# The same rotary chains as rope.py, timed as the sum of their kernels' GPU durations
# (torch.profiler), so the host's dispatch between small kernels does not count: what a
# training step, whose host runs ahead of the GPU, pays. Two chains: Megatron-Core's
# unfused apply_rotary_pos_emb on the [s, b, h, d] query and key (contiguous), and the
# PyTorch reference's Rotary on [b, h, s, d] views of the QKV output
# (calibrate/pytorch_reference.py: x*cos + cat(-x2, x1)*sin), forward and backward.
import json, torch
from torch.profiler import profile, ProfilerActivity
dev = torch.device("cuda")

def rotate_half(x):
    x1, x2 = torch.chunk(x, 2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)

def mcore_unfused(t, freqs):
    rot = freqs.shape[-1]
    t, t_pass = t[..., :rot], t[..., rot:]
    cos_, sin_ = torch.cos(freqs).to(t.dtype), torch.sin(freqs).to(t.dtype)
    return torch.cat(((t * cos_) + (rotate_half(t) * sin_), t_pass), dim=-1)

def reference(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin

def kernel_us(fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    total = sum(e.device_time_total for e in p.key_averages() if e.device_time_total > 0 and e.key != "" )
    kernels = sum(e.count for e in p.key_averages() if e.device_time_total > 0)
    return total / reps, kernels / reps

for name, b, s, hq, hkv, d in [("llama3-8b tp1", 1, 8192, 32, 8, 128), ("llama3-8b tp1 s16384", 1, 16384, 32, 8, 128),
                               ("llama3-70b tp8", 1, 8192, 8, 1, 128), ("llama3-8b mb2 s4096", 2, 4096, 32, 8, 128)]:
    elems = b * s * (hq + hkv) * d
    src = torch.empty(elems, device=dev, dtype=torch.bfloat16); dst = torch.empty_like(src)
    copy_us, _ = kernel_us(lambda: dst.copy_(src))
    rate = 4 * elems / (copy_us * 1e-6)
    # Megatron-Core: [s, b, h, d]
    q = torch.randn(s, b, hq, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(s, b, hkv, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    freqs = torch.randn(s, 1, 1, d, device=dev)
    mf, mfk = kernel_us(lambda: (mcore_unfused(q, freqs), mcore_unfused(k, freqs)))
    oq, ok = mcore_unfused(q, freqs), mcore_unfused(k, freqs)
    gq, gk = torch.randn_like(oq), torch.randn_like(ok)
    mb, mbk = kernel_us(lambda: torch.autograd.grad((oq, ok), (q, k), (gq, gk), retain_graph=True))
    # The reference: [b, h, s, d] views of one [b, s, (hq + 2 hkv) d] QKV output
    qkv = torch.randn(b, s, (hq + 2 * hkv) * d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    cos = torch.randn(1, 1, s, d, device=dev, dtype=torch.bfloat16); sin = torch.randn_like(cos)
    def views():
        qq, kk, _ = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
        return qq.view(b, s, hq, d).transpose(1, 2), kk.view(b, s, hkv, d).transpose(1, 2)
    rf, rfk = kernel_us(lambda: [reference(x, cos, sin) for x in views()])
    outs = [reference(x, cos, sin) for x in views()]
    gs = [torch.randn_like(o) for o in outs]
    rb, rbk = kernel_us(lambda: torch.autograd.grad(outs, (qkv,), gs, retain_graph=True))
    row = {"shape": name, "elements_q_plus_k": elems, "copy_GBps": rate / 1e9,
           "mcore_forward_us": mf, "mcore_forward_kernels": mfk, "mcore_backward_us": mb, "mcore_backward_kernels": mbk,
           "reference_forward_us": rf, "reference_forward_kernels": rfk, "reference_backward_us": rb,
           "reference_backward_kernels": rbk}
    for key in ("mcore_forward", "mcore_backward", "reference_forward", "reference_backward"):
        row[key + "_bytes_per_element"] = row[key + "_us"] * 1e-6 * rate / elems
    print(json.dumps(row), flush=True)
