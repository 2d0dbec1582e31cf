"""Fused attention with and without attention dropout on one H200: what generating the
dropout mask inside the kernel costs (Megatron's default --attention-dropout 0.1 runs it in
TE's fused attention). Causal, bf16, head dim 128; PyTorch SDPA with one backend at a time
(cuDNN's fused attention, FlashAttention-2), forward and forward + backward, timed with
CUDA events, median of 30 after 5 warm-ups. A backend that refuses dropout is reported so.
"""
import json, statistics, sys, torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend

out = sys.argv[1]
dev = torch.device("cuda")
shapes = [(1, 16, 4096), (2, 16, 4096), (1, 32, 4096), (4, 16, 2048), (1, 8, 8192), (1, 64, 2048)]  # batch, heads, seq
backends = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash2", SDPBackend.FLASH_ATTENTION)]

def med(fn, n=30):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); e.synchronize()
        ts.append(s.elapsed_time(e) / 1e3)
    return statistics.median(ts)

rows = []
for b, h, s in shapes:
    q, k, v = (torch.randn(b, h, s, 128, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    go = torch.randn(b, h, s, 128, device=dev, dtype=torch.bfloat16)
    fwd_flops = 4.0 * b * h * s * s * 128 / 2
    for name, be in backends:
        for p in (0.0, 0.1):
            r = {"backend": name, "batch": b, "heads": h, "seq": s, "dropout": p}
            try:
                with sdpa_kernel([be]):
                    def f():
                        with torch.no_grad():
                            F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
                    def fb():
                        o = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
                        o.backward(go)
                    r["fwd_s"] = med(f)
                    r["fwdbwd_s"] = med(fb)
                    r["fwd_tflops"] = fwd_flops / r["fwd_s"] / 1e12
                    r["fwdbwd_tflops"] = 3.5 * fwd_flops / r["fwdbwd_s"] / 1e12
            except Exception as ex:  # a backend that cannot run this case
                r["error"] = str(ex).split("\n")[0][:200]
            rows.append(r)
            print(json.dumps(r), flush=True)
json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "rows": rows}, open(f"{out}/dropout.json", "w"), indent=1)
print(f"{'backend':7s} {'b':>2s} {'h':>3s} {'seq':>5s}  fwd p0 / p0.1 (ms)   ratio   fwd+bwd p0 / p0.1 (ms)  ratio")
for i in range(0, len(rows), 2):
    a, c = rows[i], rows[i + 1]
    if "fwd_s" in a and "fwd_s" in c:
        print(f"{a['backend']:7s} {a['batch']:2d} {a['heads']:3d} {a['seq']:5d}  {a['fwd_s']*1e3:7.3f} / {c['fwd_s']*1e3:7.3f}  {c['fwd_s']/a['fwd_s']:6.3f}"
              f"   {a['fwdbwd_s']*1e3:7.3f} / {c['fwdbwd_s']*1e3:7.3f}  {c['fwdbwd_s']/a['fwdbwd_s']:6.3f}")
    else:
        print(a['backend'], a['batch'], a['heads'], a['seq'], a.get('error', ''), '|', c.get('error', ''))
