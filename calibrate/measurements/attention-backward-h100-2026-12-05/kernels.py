# Fused attention's backward kernel by kernel, at sequence lengths the tile fit did not see
# (1,024 and 4,096 tokens) and on an H100: PyTorch SDPA (cuDNN and FlashAttention-2), causal,
# head dim 128, BF16. Per (backend, tokens, batch x heads): the forward and the whole backward
# timed by CUDA events (burst: 4-64 calls after a 50 ms pause, median of 7, as
# ../attention-tiles-h200-2026-12-03/tiles.py), then one profiled backward split into its
# kernels (the row dot with the accumulator's zeroing, the main kernel, the dQ conversion).
# Prints CSV: backend,seq,batch_heads,tiles_per_sm,what,ms
import time, torch
from torch.nn.attention import sdpa_kernel, SDPBackend
from torch.profiler import profile, ProfilerActivity
import torch.nn.functional as F

dev = "cuda"
sms = torch.cuda.get_device_properties(0).multi_processor_count
print("gpu,%s,sms,%d" % (torch.cuda.get_device_name(0), sms))
print("backend,seq,batch_heads,tiles_per_sm,what,ms")
d = 128


def timed(fn, flops):
    reps = max(4, min(64, int(20e-3 * 400e12 / flops)))
    times = []
    for _ in range(7):
        time.sleep(0.05)
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(reps):
            fn()
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1) / reps)
    return sorted(times)[3]


for seq in [1024, 4096]:
    for bh in [8, 16, 32, 64, 128]:
        q = torch.randn(1, bh, seq, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn_like(q, requires_grad=True)
        v = torch.randn_like(q, requires_grad=True)
        do = torch.randn_like(q)
        fwd_flops = 4.0 * bh * seq * seq * d / 2
        n = bh * ((seq + 127) // 128) / sms
        for name, be in [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash2", SDPBackend.FLASH_ATTENTION)]:
            with sdpa_kernel([be]):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)

                def fwd():
                    F.scaled_dot_product_attention(q, k, v, is_causal=True)

                def bwd():
                    torch.autograd.grad(o, (q, k, v), do, retain_graph=True)

                for _ in range(3):
                    fwd()
                    bwd()
                torch.cuda.synchronize()
                row = "%s,%d,%d,%.2f" % (name, seq, bh, n)
                print("%s,forward,%.4f" % (row, timed(fwd, fwd_flops)), flush=True)
                print("%s,backward,%.4f" % (row, timed(bwd, 2.5 * fwd_flops)), flush=True)
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(5):
                        bwd()
                    torch.cuda.synchronize()
                for e in prof.key_averages():
                    t = e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
                    if t > 0 and e.count >= 5 and not e.key.startswith("ProfilerStep"):
                        print("%s,kernel %s,%.4f" % (row, e.key[:90].replace(",", ";"), t / e.count / 1e3),
                              flush=True)
