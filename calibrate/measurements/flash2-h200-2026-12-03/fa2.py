# FlashAttention-2 (PyTorch SDPA's FLASH_ATTENTION backend, the flash-attn 2 kernels
# PyTorch carries), cuDNN's fused attention and the memory-efficient kernel, forward and
# forward + backward, causal, head dim 128, BF16, on one GPU. Burst rates: each sample is
# 10-40 ms of kernels after a 50 ms pause, as calibrations time kernels. Prints CSV.
import sys, time, torch
from torch.nn.attention import sdpa_kernel, SDPBackend
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
dev = "cuda"
print("gpu,%s" % torch.cuda.get_device_name(0))
print("torch,%s" % torch.__version__)
print("backend,seq,batch,heads,head_dim,pass,ms_median,tflops")
backends = [("flash2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
            ("mem_efficient", SDPBackend.EFFICIENT_ATTENTION)]
heads, d = 16, 128
for seq, batch in [(512, 48), (2048, 12), (4096, 6), (8192, 3)]:
    q = torch.randn(batch, heads, seq, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn_like(q, requires_grad=True)
    v = torch.randn_like(q, requires_grad=True)
    do = torch.randn_like(q)
    fwd_flops = 4.0 * batch * heads * seq * seq * d / 2  # causal: half the score matrix
    for name, be in backends:
        try:
            with sdpa_kernel([be]):
                def fwd():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
                def fb():
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    o.backward(do)
                for _ in range(3):
                    fb()
                torch.cuda.synchronize()
                for label, fn, flops in [("forward", fwd, fwd_flops), ("forward+backward", fb, 3.5 * fwd_flops)]:
                    reps = max(2, int(20e-3 * 400e12 / flops))
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
                    ms = times[len(times) // 2]
                    print("%s,%d,%d,%d,%d,%s,%.4f,%.1f" % (name, seq, batch, heads, d, label, ms, flops / ms / 1e9))
                    sys.stdout.flush()
        except Exception as e:  # a backend this build lacks
            print("%s,%d,%d,%d,%d,error,%s,0" % (name, seq, batch, heads, d, str(e).splitlines()[0][:60]))
