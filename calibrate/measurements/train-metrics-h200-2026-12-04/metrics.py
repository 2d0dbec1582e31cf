"""Composer's training-metric update on MPT's logits, on one GPU.

After each micro-batch's backward, Composer (0.13-0.17, `Trainer._eval_train_metrics`) runs
each training metric's `update` on the forward's logits under the precision context
(torch.autocast bfloat16 for amp_bf16). MPT's two (LanguageCrossEntropy, LanguagePerplexity)
each call torch.nn.CrossEntropyLoss(ignore_index=-100, reduction='sum') on the BF16 logits.
Times, per shape (tokens x vocab), with CUDA events, median of 15:
  metric   : one such update (autocast bf16, BF16 logits), as the metric runs it;
  float_ce : F.cross_entropy(logits.float(), reduction='sum') outside autocast;
  copy     : a BF16 device copy of the logits (the stream reference).
Prints one JSON line per (shape, variant).
"""
import json, statistics, sys
import torch

dev = 'cuda'
V = 50368


def timed(fn, n=15):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    return statistics.median(ts)


print(json.dumps({'torch': torch.__version__, 'gpu': torch.cuda.get_device_name()}), flush=True)
for tokens in (4096, 12288, 24576):
    logits = torch.randn(tokens, V, device=dev, dtype=torch.bfloat16)
    target = torch.randint(0, V, (tokens,), device=dev)
    target[-1] = -100
    loss = torch.nn.CrossEntropyLoss(ignore_index=-100, reduction='sum')
    state = torch.zeros((), device=dev)

    def metric():
        with torch.no_grad(), torch.autocast('cuda', dtype=torch.bfloat16):
            state.add_(loss(logits, target))
            _ = (target != -100).sum()

    def float_ce():
        with torch.no_grad():
            state.add_(torch.nn.functional.cross_entropy(logits.float(), target, ignore_index=-100, reduction='sum'))

    out = torch.empty_like(logits)
    for name, fn in (('metric', metric), ('float_ce', float_ce), ('copy', lambda: out.copy_(logits))):
        t = timed(fn)
        print(json.dumps({'tokens': tokens, 'vocab': V, 'variant': name, 'gpu_s': t,
                          'logit_bytes': tokens * V * 2}), flush=True)
    del logits, out
    torch.cuda.empty_cache()
