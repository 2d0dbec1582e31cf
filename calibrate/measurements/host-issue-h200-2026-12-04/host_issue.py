import time, importlib, sys
import torch
for m in ["transformer_engine", "apex", "megatron", "flash_attn"]:
    try:
        importlib.import_module(m); print("has", m)
    except Exception as e:
        print("no", m, type(e).__name__)
dev = "cuda"
def layer_eager(h, ffn, heads):
    class L(torch.nn.Module):
        def __init__(s):
            super().__init__()
            s.ln1 = torch.nn.LayerNorm(h); s.qkv = torch.nn.Linear(h, 3*h); s.proj = torch.nn.Linear(h, h)
            s.ln2 = torch.nn.LayerNorm(h); s.fc1 = torch.nn.Linear(h, ffn); s.fc2 = torch.nn.Linear(ffn, h)
        def forward(s, x):
            S, B, _ = x.shape
            q, k, v = s.qkv(s.ln1(x)).view(S, B, 3, heads, h // heads).permute(2, 1, 3, 0, 4)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.1)
            a = a.permute(2, 0, 1, 3).reshape(S, B, h)
            x = x + torch.nn.functional.dropout(s.proj(a), 0.1)
            return x + torch.nn.functional.dropout(s.fc2(torch.nn.functional.gelu(s.fc1(s.ln2(x)))), 0.1)
    return L()
def bench(make, name, h, ffn, heads, seq, layers=24):
    torch.manual_seed(0)
    mods = torch.nn.ModuleList([make(h, ffn, heads) for _ in range(layers)]).to(dev, torch.bfloat16)
    for tiny in (False, True):
        S = 128 if tiny else seq
        x = torch.randn(S, 1, h, device=dev, dtype=torch.bfloat16, requires_grad=True)
        def step():
            y = x
            for m in mods: y = m(y)
            y.float().sum().backward()
        for _ in range(3): step()
        torch.cuda.synchronize()
        n = 10
        t0 = time.perf_counter(); e0 = torch.cuda.Event(enable_timing=True); e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(n): step()
        host = (time.perf_counter() - t0) / n
        e1.record(); torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / n
        print(f"{name} h={h} seq={S} layers={layers}: host issue {host*1e3:.2f} ms/step, wall {wall*1e3:.2f} ms/step, "
              f"gpu {e0.elapsed_time(e1)/n:.2f} ms/step, host per layer fwd+bwd {host/layers*1e6:.0f} us")
bench(layer_eager, "eager", 2048, 8192, 16, 4096)
try:
    import transformer_engine.pytorch as te
    def make_te(h, ffn, heads):
        return te.TransformerLayer(h, ffn, heads, hidden_dropout=0.1, attention_dropout=0.1, self_attn_mask_type="causal",
                                   params_dtype=torch.bfloat16, fuse_qkv_params=True)
    bench(make_te, "te", 2048, 8192, 16, 4096)
    bench(make_te, "te", 4096, 16384, 32, 4096)
except Exception as e:
    print("te bench failed", repr(e)[:300])
