# Fused attention's rate by query tiles per SM: PyTorch SDPA (cuDNN and FlashAttention-2),
# causal, head dim 128, BF16, over batch x heads at two sequence lengths. Burst rates: each
# sample 4-64 calls after a 50 ms pause, medians of 7. The backward is timed by itself
# (autograd.grad of a saved forward). Prints CSV.
import time, torch
from torch.nn.attention import sdpa_kernel, SDPBackend
import torch.nn.functional as F

dev = "cuda"
sms = torch.cuda.get_device_properties(0).multi_processor_count
print("gpu,%s,sms,%d" % (torch.cuda.get_device_name(0), sms))
print("backend,seq,batch_heads,tiles_per_sm,pass,ms_median,tflops")
d = 128
for seq in [2048, 8192]:
    for bh in [4, 8, 16, 32, 64, 128, 256]:
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
                    fwd(); bwd()
                torch.cuda.synchronize()
                for label, fn, flops in [("forward", fwd, fwd_flops), ("backward", bwd, 2.5 * fwd_flops)]:
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
                    times.sort()
                    ms = times[3]
                    print("%s,%d,%d,%.2f,%s,%.4f,%.1f" % (name, seq, bh, n, label, ms, flops / ms / 1e9), flush=True)
