#!/usr/bin/env python3
"""One GPU's training step of a Llama 3 8B-shaped model as TorchTitan runs it (parallelize_llama.py and model.py of
pytorch/torchtitan 1ea476e9f, 2024-04): each TransformerBlock and the root under FSDP2's fully_shard with
MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32) on a one-rank group, no autocast; separate wq, wk, wv,
wo, w1, w3, w2 linears without bias; the rotary embedding by complex multiplication in FP32; repeat_kv before SDPA;
RMSNorm; FP32 logits into F.cross_entropy; AdamW(foreach=True); clip_grad_norm_(1.0). Activation checkpointing per
block, as TorchTitan's checkpoint_wrapper: none, full (every block), layer (every second block: selective_ac_option
"2") and op (every block under torch's selective checkpointing with TorchTitan's policy: the outputs of mm and
flash SDPA saved, except every second mm of the block, in each of forward and recompute).

Prints one JSON line a variant: the median step time of the timed steps (CUDA events around each step, after
warm-up steps), the peak memory allocated, and the layout. Run on one GPU:
    python3 step.py [--layers 8] [--steps 8] [--warmup 3] [--variants none,full,layer,op]"""
import argparse, json, os, statistics

import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument('--layers', type=int, default=8)
p.add_argument('--hidden', type=int, default=4096)
p.add_argument('--heads', type=int, default=32)
p.add_argument('--kv-heads', type=int, default=8)
p.add_argument('--ffn', type=int, default=14336)
p.add_argument('--vocab', type=int, default=32000)
p.add_argument('--seq', type=int, default=8192)
p.add_argument('--batch', type=int, default=1)
p.add_argument('--steps', type=int, default=8)
p.add_argument('--warmup', type=int, default=3)
p.add_argument('--variants', default='none,full,layer,op')
args = p.parse_args()

os.environ.setdefault('MASTER_ADDR', '127.0.0.1')
os.environ.setdefault('MASTER_PORT', '29517')
torch.distributed.init_process_group('nccl', rank=0, world_size=1)
try:
    from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
except ImportError:
    from torch.distributed._composable.fsdp import fully_shard, MixedPrecisionPolicy
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper as ptd_checkpoint_wrapper
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts, CheckpointPolicy

dev = torch.device('cuda')


def precompute_freqs_cis(dim, end, theta=500000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    fc = freqs_cis.view(1, xq_.shape[1], 1, xq_.shape[-1])
    xq_out = torch.view_as_real(xq_ * fc).flatten(3)
    xk_out = torch.view_as_real(xk_ * fc).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def repeat_kv(x, n_rep):
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return x[:, :, :, None, :].expand(bs, slen, n_kv_heads, n_rep, head_dim).reshape(bs, slen, n_kv_heads * n_rep,
                                                                                     head_dim)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.n_heads, self.n_kv = args.heads, args.kv_heads
        self.head_dim = args.hidden // args.heads
        self.wq = nn.Linear(args.hidden, args.heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.hidden, args.kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.hidden, args.kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.heads * self.head_dim, args.hidden, bias=False)

    def forward(self, x, freqs_cis):
        bsz, seqlen, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
        xq = xq.view(bsz, seqlen, self.n_heads, self.head_dim)
        xk = xk.view(bsz, seqlen, self.n_kv, self.head_dim)
        xv = xv.view(bsz, seqlen, self.n_kv, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis)
        keys = repeat_kv(xk, self.n_heads // self.n_kv)
        values = repeat_kv(xv, self.n_heads // self.n_kv)
        out = F.scaled_dot_product_attention(xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2),
                                             is_causal=True)
        return self.wo(out.transpose(1, 2).contiguous().view(bsz, seqlen, -1))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(args.hidden, args.ffn, bias=False)
        self.w2 = nn.Linear(args.ffn, args.hidden, bias=False)
        self.w3 = nn.Linear(args.hidden, args.ffn, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = Attention()
        self.feed_forward = FeedForward()
        self.attention_norm = nn.RMSNorm(args.hidden, eps=1e-5)
        self.ffn_norm = nn.RMSNorm(args.hidden, eps=1e-5)

    def forward(self, x, freqs_cis):
        h = x + self.attention(self.attention_norm(x), freqs_cis)
        return h + self.feed_forward(self.ffn_norm(h))


class Model(nn.Module):
    def __init__(self, variant):
        super().__init__()
        self.tok_embeddings = nn.Embedding(args.vocab, args.hidden)
        self.register_buffer('freqs_cis', precompute_freqs_cis(args.hidden // args.heads, args.seq), persistent=False)
        self.layers = nn.ModuleList()
        for i in range(args.layers):
            b = Block()
            if variant == 'full' or (variant == 'layer' and (i + 1) % 2 == 0):
                b = ptd_checkpoint_wrapper(b, checkpoint_fn=checkpoint, use_reentrant=False, preserve_rng_state=False)
            elif variant == 'op':
                b = ptd_checkpoint_wrapper(b, checkpoint_fn=checkpoint, use_reentrant=False, preserve_rng_state=False,
                                           context_fn=op_context)
            self.layers.append(b)
        self.norm = nn.RMSNorm(args.hidden, eps=1e-5)
        self.output = nn.Linear(args.hidden, args.vocab, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, self.freqs_cis)
        return self.output(self.norm(h)).float()


SAVE = {torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_efficient_attention.default,
        torch.ops.aten._scaled_dot_product_flash_attention.default}
if hasattr(torch.ops.aten, '_scaled_dot_product_cudnn_attention'):
    SAVE.add(torch.ops.aten._scaled_dot_product_cudnn_attention.default)


def op_context():
    meta = {'forward': 0, 'recompute': 0}

    def policy(ctx, func, *a, **k):
        mode = 'recompute' if ctx.is_recompute else 'forward'
        if func == torch.ops.aten.mm.default:
            meta[mode] += 1
        save = func in SAVE and not (func == torch.ops.aten.mm.default and meta[mode] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def run(variant):
    torch.manual_seed(0)
    with torch.device('meta'):
        model = Model(variant)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for i, layer in enumerate(model.layers):
        fully_shard(layer, mp_policy=mp, reshard_after_forward=i < len(model.layers) - 1)
    fully_shard(model, mp_policy=mp)
    model.to_empty(device=dev)
    model.freqs_cis = precompute_freqs_cis(args.hidden // args.heads, args.seq).to(dev)
    with torch.no_grad():
        for prm in model.parameters():
            prm.normal_(0, 0.02)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq), device=dev)
    labels = torch.randint(0, args.vocab, (args.batch, args.seq), device=dev)
    times = []
    torch.cuda.reset_peak_memory_stats()
    for step in range(args.warmup + args.steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        logits = model(tokens)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(0, 1))
        del logits
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        opt.zero_grad()
        b.record()
        torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(a.elapsed_time(b))
    peak = torch.cuda.max_memory_allocated()
    del model, opt
    torch.cuda.empty_cache()
    return {'variant': variant, 'step_ms': statistics.median(times), 'steps_ms': [round(t, 3) for t in times],
            'peak_allocated_gib': peak / 2**30, 'layers': args.layers, 'hidden': args.hidden, 'heads': args.heads,
            'kv_heads': args.kv_heads, 'ffn': args.ffn, 'vocab': args.vocab, 'seq': args.seq, 'batch': args.batch,
            'torch': torch.__version__, 'gpu': torch.cuda.get_device_name()}


for v in args.variants.split(','):
    print(json.dumps(run(v)), flush=True)
torch.distributed.destroy_process_group()
