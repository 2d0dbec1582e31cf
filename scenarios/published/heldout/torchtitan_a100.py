#!/usr/bin/env python3
"""TorchTitan's A100 table (pytorch/torchtitan docs/performance.md at 1ea476e9f, 2024-04-24): Llama 3 8B and 70B
(sequence 8,192) and Llama 2 13B and 70B (4,096) on 64 A100 80 GB, FSDP2 (1D), tokens a second a GPU ("WPS", train.py:
the rank's tokens over the logging interval). Each row runs scenarios/examples/pytorch/llama2-13b-64xa100-torchtitan.yaml
(plain PyTorch, FSDP2 with BF16 parameters and FP32 reduce-scatters, SDPA's FlashAttention-2, FP32 logits) with the
row's shape, batch and activation checkpointing: "selective layer" is TorchTitan's default selective_ac_option "2",
every second TransformerBlock checkpointed, so training.recompute=full with recompute_num_layers = layers / 2; "full"
is every block; "selective op" is torch's selective checkpointing with TorchTitan's policy (every second matmul and every
op that is no matmul or attention run again), training.recompute=op. The cluster is not stated: DGX A100's
fabric is assumed, and these layouts are compute-bound in the model (exposed communication under 1 % of a step).
Run from the repository root after ./setup.sh (a few seconds on two cores):
    python3 scenarios/published/heldout/torchtitan_a100.py [--set key=value ...]"""
import os, sys, concurrent.futures as cf

from heldout_run import ROOT, extra_sets, run_json

BASE = os.path.join(ROOT, 'scenarios', 'examples', 'pytorch', 'llama2-13b-64xa100-torchtitan.yaml')
# model -> (layers, hidden, heads, kv_heads, ffn_hidden, vocab, seq_len): the Llama 2 and 3 model cards
SHAPES = {'llama3-8b': (32, 4096, 32, 8, 14336, 128256, 8192), 'llama3-70b': (80, 8192, 64, 8, 28672, 128256, 8192),
          'llama2-13b': (40, 5120, 40, 40, 13824, 32000, 4096), 'llama2-70b': (80, 8192, 64, 8, 28672, 32000, 4096)}
# (model, local batch, activation checkpointing, published tokens/s a GPU)
ROWS = [('llama3-8b', 1, 'selective layer', 2904), ('llama3-8b', 1, 'selective op', 2973),
        ('llama3-70b', 1, 'full', 331), ('llama2-13b', 2, 'none', 2162), ('llama2-13b', 2, 'selective layer', 1914),
        ('llama2-13b', 2, 'selective op', 1904), ('llama2-70b', 1, 'selective op', 355),
        ('llama2-70b', 2, 'full', 353)]
GPUS = 64

extra = extra_sets(sys.argv[1:])


def run(row):
    model, batch, ac, published = row
    layers, hidden, heads, kv, ffn, vocab, seq = SHAPES[model]
    sets = ['model.layers=%d' % layers, 'model.hidden=%d' % hidden, 'model.heads=%d' % heads,
            'model.kv_heads=%d' % kv, 'model.ffn_hidden=%d' % ffn, 'model.vocab=%d' % vocab,
            'model.seq_len=%d' % seq, 'parallel.micro_batch=%d' % batch, 'training.global_batch=%d' % (batch * GPUS)]
    if ac == 'selective op':
        # The count belongs to full recompute: the file's goes back to its default.
        sets += ['training.recompute=op', 'training.recompute_num_layers=all']
    else:
        # None of the layers run again is no checkpointing, all of them full, op for op (the base file recomputes).
        sets += ['training.recompute_num_layers=%d' % {'none': 0, 'full': layers, 'selective layer': layers // 2}[ac]]
    d, why = run_json(BASE, sets + extra)
    if d is None:
        return row, None, why.split('error: ')[-1][:120]
    return row, d['tokens_per_s'] / GPUS, ''


with cf.ThreadPoolExecutor(2) as ex:
    results = list(ex.map(run, ROWS))
errors = []
print('%-11s %5s %-16s %9s %9s %8s' % ('model', 'batch', 'checkpointing', 'published', 'model', 'error'))
for (model, batch, ac, published), predicted, why in results:
    if predicted is None:
        print('%-11s %5d %-16s %9d %9s  not run: %s' % (model, batch, ac, published, '-', why))
        continue
    err = 100.0 * (predicted - published) / published
    errors.append(abs(err))
    print('%-11s %5d %-16s %9d %9.0f %+7.1f%%' % (model, batch, ac, published, predicted, err))
if errors:
    print('%d rows run: mean absolute error %.1f %%, worst %.1f %%' % (len(errors), sum(errors) / len(errors),
                                                                        max(errors)))
