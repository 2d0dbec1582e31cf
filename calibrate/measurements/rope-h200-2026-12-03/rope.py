# The rotary embedding's kernels as Megatron-Core runs them between the QKV GEMM and the
# attention kernel, timed on one GPU: the unfused chain of apply_rotary_pos_emb
# (t*cos + rotate_half(t)*sin, then the concatenation with the unrotated part), its
# autograd backward, the query's copy out of the grouped QKV layout under GQA, and the
# concatenation of the Q, K and V gradients. Each is set against a device copy of the
# same elements, so its cost reads as bytes moved per element at copy rate.
# Transformer Engine's fused kernel is timed too where transformer_engine imports.
import json, sys, torch

def timed(fn, reps=50):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) * 1e-3)
    ts.sort()
    return ts[len(ts) // 2]

def rotate_half(x):
    x1, x2 = torch.chunk(x, 2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)

def rope_unfused(t, freqs):
    rot = freqs.shape[-1]
    t, t_pass = t[..., :rot], t[..., rot:]
    cos_, sin_ = torch.cos(freqs).to(t.dtype), torch.sin(freqs).to(t.dtype)
    t = (t * cos_) + (rotate_half(t) * sin_)
    return torch.cat((t, t_pass), dim=-1)

rows = []
dev = torch.device("cuda")
try:
    from transformer_engine.pytorch.attention import apply_rotary_pos_emb as te_rope
except Exception as e:  # noqa: BLE001
    te_rope = None
    print("transformer_engine:", type(e).__name__, e, file=sys.stderr)
for name, s, hq, hkv, d in [("llama3-8b tp1 4096", 4096, 32, 8, 128), ("llama3-8b tp1 8192", 8192, 32, 8, 128),
                            ("llama3-70b tp8 8192", 8192, 8, 1, 128), ("llama3-70b tp4 4096", 4096, 16, 2, 128)]:
    g = hq // hkv
    mixed = torch.randn(s, 1, hkv, (g + 2) * d, device=dev, dtype=torch.bfloat16)
    q, k, v = torch.split(mixed, [g * d, d, d], dim=3)
    freqs = torch.randn(s, 1, 1, d, device=dev, dtype=torch.float32)
    elems = s * (hq + hkv) * d
    qf = q.reshape(s, 1, hq, d).contiguous()
    kf = k.contiguous()
    both = torch.empty(elems, device=dev, dtype=torch.bfloat16)
    dst = torch.empty_like(both)
    copy_s = timed(lambda: dst.copy_(both))
    rate = 2 * elems * 2 / copy_s  # bytes read + written per second
    reshape_s = timed(lambda: q.reshape(s, 1, hq, d)) if g > 1 else 0.0
    fwd_s = timed(lambda: (rope_unfused(qf, freqs), rope_unfused(kf, freqs)))
    qr, kr = qf.clone().requires_grad_(True), kf.clone().requires_grad_(True)
    oq, ok = rope_unfused(qr, freqs), rope_unfused(kr, freqs)
    gq, gk = torch.randn_like(oq), torch.randn_like(ok)
    bwd_s = timed(lambda: torch.autograd.grad((oq, ok), (qr, kr), (gq, gk), retain_graph=True))
    dq, dk, dv = torch.randn(s, 1, hq, d, device=dev, dtype=torch.bfloat16), torch.randn_like(kf), torch.randn_like(kf)
    cat_s = timed(lambda: torch.cat((dq.view(s, 1, hkv, g * d), dk, dv), dim=3))
    row = {"shape": name, "elements_q_plus_k": elems, "copy_rate_GBps": rate / 1e9,
           "unfused_forward_us": fwd_s * 1e6, "unfused_backward_us": bwd_s * 1e6,
           "query_reshape_us": reshape_s * 1e6, "qkv_grad_cat_us": cat_s * 1e6,
           "unfused_forward_bytes_per_element": fwd_s * rate / elems,
           "unfused_backward_bytes_per_element": bwd_s * rate / elems}
    if te_rope is not None:
        tf = timed(lambda: (te_rope(qf, freqs, fused=True), te_rope(kf, freqs, fused=True)))
        row["te_fused_forward_us"] = tf * 1e6
        row["te_fused_forward_bytes_per_element"] = tf * rate / elems
    rows.append(row)
    print(json.dumps(row), flush=True)
