"""MPT's FlashAttention path (LLM Foundry 2024-01, flash-attn 2.x): what the unpad / pad around the
kernel costs in an eager training step.

A stack of MPT blocks (LayerNorm, Wqkv, attention, out-proj, residual, LayerNorm, up 4h, GELU,
down, residual), BF16 weights (FSDP MixedPrecision param_dtype BF16: no autocast casts), forward
and backward, run two ways with the same attention kernel:
  plain : q, k, v viewed as [b, s, heads, d] and passed to the fixed-length kernel;
  unpad : what llmfoundry/models/layers/attention.py `flash_attn_fn` does with flash-attn 2:
          a key-padding mask of ones, flash_attn.bert_padding.unpad_input on q, k and v
          (mask sum, nonzero, max().item(), cumsum, pad, a gather of the rows), the
          variable-length kernel, pad_input on the output (zeros, index_put).
With flash-attn installed the kernels are flash_attn_func / flash_attn_varlen_func and
bert_padding itself; without it both variants call SDPA's flash backend and the padding ops
are written out from flash-attn 2.4.2's bert_padding.py (the same torch ops).
Prints one JSON line per (shape, variant, repeat); the A/B pairs alternate.
"""
import json, sys, time
import torch
import torch.nn.functional as F

dev = 'cuda'
try:
    from flash_attn import bert_padding, flash_attn_func, flash_attn_varlen_func
    HAVE_FA = True
except Exception:
    HAVE_FA = False


class IndexFirstAxis(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, idx):
        ctx.save_for_backward(idx)
        ctx.n = x.shape[0]
        return torch.gather(x, 0, idx.unsqueeze(1).expand(-1, x.shape[1]))

    @staticmethod
    def backward(ctx, g):
        (idx,) = ctx.saved_tensors
        gi = torch.zeros(ctx.n, g.shape[1], device=g.device, dtype=g.dtype)
        gi.scatter_(0, idx.unsqueeze(1).expand(-1, g.shape[1]), g)
        return gi, None


class IndexPutFirstAxis(torch.autograd.Function):
    @staticmethod
    def forward(ctx, v, idx, n):
        ctx.save_for_backward(idx)
        out = torch.zeros(n, v.shape[1], device=v.device, dtype=v.dtype)
        out[idx] = v
        return out

    @staticmethod
    def backward(ctx, g):
        (idx,) = ctx.saved_tensors
        return g[idx], None, None


def unpad_input(x, mask):
    if HAVE_FA:
        return bert_padding.unpad_input(x, mask)[:4]
    seqlens = mask.sum(dim=-1, dtype=torch.int32)
    idx = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
    maxlen = seqlens.max().item()
    cu = F.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    return IndexFirstAxis.apply(x.reshape(-1, x.shape[-1]), idx), idx, cu, maxlen


def pad_input(x, idx, b, s):
    if HAVE_FA:
        return bert_padding.pad_input(x, idx, b, s)
    return IndexPutFirstAxis.apply(x, idx, b * s).view(b, s, -1)


class Block(torch.nn.Module):
    def __init__(s, h, heads):
        super().__init__()
        s.h, s.H = h, heads
        s.ln1 = torch.nn.LayerNorm(h)
        s.wqkv = torch.nn.Linear(h, 3 * h, bias=False)
        s.out = torch.nn.Linear(h, h, bias=False)
        s.ln2 = torch.nn.LayerNorm(h)
        s.up = torch.nn.Linear(h, 4 * h, bias=False)
        s.down = torch.nn.Linear(4 * h, h, bias=False)

    def attn(s, x, unpad):
        b, n, _ = x.shape
        H, d = s.H, s.h // s.H
        q, k, v = s.wqkv(x).split(s.h, dim=-1)
        if not unpad:
            q, k, v = (t.reshape(b, n, H, d) for t in (q, k, v))
            if HAVE_FA:
                o = flash_attn_func(q, k, v, causal=True)
            else:
                o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                   is_causal=True).transpose(1, 2)
            return s.out(o.reshape(b, n, s.h))
        mask = torch.ones_like(k[:, :, 0], dtype=torch.bool)
        qu, iq, cq, mq = unpad_input(q, mask[:, -n:])
        ku, _, ck, mk = unpad_input(k, mask)
        vu, _, _, _ = unpad_input(v, mask)
        qu, ku, vu = (t.reshape(-1, H, d) for t in (qu, ku, vu))
        if HAVE_FA:
            ou = flash_attn_varlen_func(qu, ku, vu, cq, ck, mq, mk, causal=True)
        else:
            ou = F.scaled_dot_product_attention(qu.view(b, n, H, d).transpose(1, 2), ku.view(b, n, H, d).transpose(1, 2),
                                                vu.view(b, n, H, d).transpose(1, 2), is_causal=True).transpose(1, 2)
        o = pad_input(ou.reshape(-1, s.h), iq, b, n)
        return s.out(o)

    def forward(s, x, unpad):
        x = x + s.attn(F.layer_norm(x, (s.h,), s.ln1.weight, s.ln1.bias), unpad)
        return x + s.down(F.gelu(s.up(F.layer_norm(x, (s.h,), s.ln2.weight, s.ln2.bias)), approximate='none'))


def step(blocks, x, unpad):
    y = x
    for blk in blocks:
        y = blk(y, unpad)
    y.float().sum().backward()


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else '.'
    print(json.dumps({'torch': torch.__version__, 'flash_attn': HAVE_FA, 'gpu': torch.cuda.get_device_name()}), flush=True)
    shapes = [('mpt-1b', 2048, 16, 12), ('mpt-3b', 2560, 20, 8), ('mpt-7b', 4096, 32, 6)]
    layers, seq, iters = 6, 2048, 8
    for name, h, heads, mb in shapes:
        torch.manual_seed(0)
        blocks = [Block(h, heads).to(dev, torch.bfloat16) for _ in range(layers)]
        x = torch.randn(mb, seq, h, device=dev, dtype=torch.bfloat16, requires_grad=True)
        for unpad in (False, True):
            for _ in range(3):
                step(blocks, x, unpad)
        torch.cuda.synchronize()
        for rep in range(5):
            for unpad in (False, True):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                e0.record()
                for _ in range(iters):
                    step(blocks, x, unpad)
                e1.record()
                torch.cuda.synchronize()
                wall = (time.perf_counter() - t0) / iters
                gpu = e0.elapsed_time(e1) / 1e3 / iters
                print(json.dumps({'shape': name, 'hidden': h, 'heads': heads, 'micro_batch': mb, 'seq': seq,
                                  'layers': layers, 'variant': 'unpad' if unpad else 'plain', 'rep': rep,
                                  'step_s': gpu, 'wall_s': wall, 'per_layer_ms': gpu / layers * 1e3}), flush=True)
        del blocks, x
        torch.cuda.empty_cache()


if __name__ == '__main__':
    main()
