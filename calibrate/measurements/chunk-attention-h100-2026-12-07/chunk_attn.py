# A prefill chunk's attention as vLLM runs it: q query rows at the end of past + q keys
# (the causal mask aligned at the bottom right), Llama 3 8B's heads (32 query, 8 KV, d 128),
# BF16, on the local GPU. Prints one JSON row per (backend, q, past).
import json, sys, torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
from torch.nn.attention.bias import causal_lower_right

dev = 'cuda'
H, KVH, D = 32, 8, 128
rows = []
def timed(fn, n):
    for _ in range(3): fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n): fn()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / n / 1e3
for name, be in [('cudnn', SDPBackend.CUDNN_ATTENTION), ('flash', SDPBackend.FLASH_ATTENTION)]:
    for q in [512, 2048, 8192]:
        for past in [0, 8192, 32768, 57344]:
            kv = past + q
            Q = torch.randn(1, H, q, D, device=dev, dtype=torch.bfloat16)
            K = torch.randn(1, H, kv, D, device=dev, dtype=torch.bfloat16)  # KV heads repeated: SDPA's GQA path varies by backend
            V = torch.randn(1, H, kv, D, device=dev, dtype=torch.bfloat16)
            row = {'backend': name, 'q': q, 'past': past}
            try:
                with sdpa_kernel(be):
                    if past == 0:
                        fn = lambda: F.scaled_dot_product_attention(Q, K, V, is_causal=True)
                    else:
                        m = causal_lower_right(q, kv)
                        fn = lambda: F.scaled_dot_product_attention(Q, K, V, attn_mask=m)
                    t = timed(fn, 20)
                row['seconds'] = t
                row['tflops'] = 4.0 * H * D * q * (past + q / 2) / t / 1e12
            except Exception as ex:
                row['error'] = str(ex)[:200]
            rows.append(row)
            print(json.dumps(row), flush=True)
print(json.dumps({'gpu': torch.cuda.get_device_name(0), 'torch': torch.__version__, 'cudnn': torch.backends.cudnn.version()}))
