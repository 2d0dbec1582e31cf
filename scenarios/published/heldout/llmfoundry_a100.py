#!/usr/bin/env python3
"""LLM Foundry's A100 80 GB table (scripts/train/benchmarking/README.md at llm-foundry 5e85bd62d, 2024-01: "A100 80GB
with 1600 Gbps node-node interconnect (RoCE)"), every row: MPT-125M to MPT-70B, 512 to 65,536 tokens, 8 to 64 GPUs,
all FSDP FULL_SHARD under Composer. The four 8-GPU rows at 2,048 tokens of MPT-125M, 350M, 760M and 1B are cases;
the others are held out. Each row runs the 1B case file (llmfoundry-mpt-1b-8xa100-80gb-seq2048-bf16.yaml: Composer's
eager PyTorch, FSDP MP mode DEFAULT, BACKWARD_POST) with the row's shape (scripts/train/yamls/pretrain/mpt-*.yaml:
d_model, n_heads, n_layers, expansion 4), sequence, GPUs, micro-batch and global batch, and training.recompute=full
where the row checkpoints activations. The two 70B rows are precision bf16 with MP mode PURE: FSDP gathers and reduces
in BF16 as DEFAULT does, which the file already states. The published figure is Throughput (T/s), all GPUs.
Run from the repository root after ./setup.sh (a few seconds on two cores):
    python3 scenarios/published/heldout/llmfoundry_a100.py [--set key=value ...]"""
import os, sys, concurrent.futures as cf

from heldout_run import ROOT, extra_sets, run_json

BASE = os.path.join(ROOT, 'scenarios', 'published', 'training', 'llmfoundry-mpt-1b-8xa100-80gb-seq2048-bf16.yaml')
# MPT's pretraining yamls: d_model, n_heads, n_layers (expansion_ratio 4, vocab 50,368 in all).
SHAPES = {'125m': (768, 12, 12), '350m': (1024, 16, 24), '760m': (1536, 12, 24), '1b': (2048, 16, 24),
          '3b': (2560, 20, 32), '7b': (4096, 32, 32), '13b': (5120, 40, 40), '30b': (7168, 56, 48),
          '70b': (8192, 64, 80)}
# (model, seq, GPUs, micro-batch): the table has two 125M rows at 2,048 tokens on 8 GPUs; the case is the one of 32.
CASES = {('125m', 2048, 8, 32), ('350m', 2048, 8, 32), ('760m', 2048, 8, 24), ('1b', 2048, 8, 14)}
# (model, seq, GPUs, MicroBatchSize, GradAccum, GlobalBatchSize, Throughput (T/s), Precision, Activation Checkpointing)
ROWS = [
    ('70b', 2048, 64, 8, 4, 2048, 26274, 'bf16', True),
    ('70b', 2048, 32, 2, 16, 1024, 11962, 'bf16', True),
    ('30b', 8192, 8, 1, 21, 168, 4594, 'amp_bf16', True),
    ('30b', 4096, 8, 1, 21, 168, 6513, 'amp_bf16', True),
    ('30b', 2048, 8, 3, 21, 504, 7330, 'amp_bf16', True),
    ('30b', 1024, 8, 6, 21, 1008, 7571, 'amp_bf16', True),
    ('30b', 512, 8, 12, 21, 2016, 7739, 'amp_bf16', True),
    ('13b', 32768, 8, 1, 3, 24, 8134, 'amp_bf16', True),
    ('13b', 16384, 8, 3, 3, 72, 11454, 'amp_bf16', True),
    ('13b', 8192, 8, 5, 3, 120, 14362, 'amp_bf16', True),
    ('13b', 4096, 8, 10, 3, 240, 16482, 'amp_bf16', True),
    ('13b', 2048, 8, 2, 3, 48, 18097, 'amp_bf16', False),
    ('13b', 1024, 8, 40, 3, 960, 18647, 'amp_bf16', True),
    ('7b', 65536, 8, 1, 2, 16, 8108, 'amp_bf16', True),
    ('7b', 32768, 8, 2, 2, 32, 13382, 'amp_bf16', True),
    ('7b', 16384, 8, 4, 2, 64, 19629, 'amp_bf16', True),
    ('7b', 8192, 8, 8, 2, 128, 25655, 'amp_bf16', True),
    ('7b', 4096, 8, 16, 2, 256, 29472, 'amp_bf16', True),
    ('7b', 2048, 8, 6, 2, 96, 37130, 'amp_bf16', False),
    ('7b', 1024, 8, 64, 2, 1024, 34857, 'amp_bf16', True),
    ('3b', 65536, 8, 1, 2, 16, 14137, 'amp_bf16', True),
    ('3b', 32768, 8, 3, 6, 144, 24235, 'amp_bf16', True),
    ('3b', 16384, 8, 1, 6, 48, 44233, 'amp_bf16', False),
    ('3b', 8192, 8, 3, 6, 144, 61567, 'amp_bf16', False),
    ('3b', 4096, 8, 5, 6, 240, 75658, 'amp_bf16', False),
    ('3b', 2048, 8, 10, 2, 160, 86491, 'amp_bf16', False),
    ('3b', 1024, 8, 20, 6, 960, 92643, 'amp_bf16', False),
    ('3b', 512, 8, 40, 6, 1920, 97019, 'amp_bf16', False),
    ('1b', 65536, 8, 1, 2, 16, 24353, 'amp_bf16', True),
    ('1b', 32768, 8, 1, 4, 32, 50207, 'amp_bf16', False),
    ('1b', 16384, 8, 2, 4, 64, 79650, 'amp_bf16', False),
    ('1b', 8192, 8, 3, 4, 96, 110516, 'amp_bf16', False),
    ('1b', 4096, 8, 7, 4, 224, 142457, 'amp_bf16', False),
    ('1b', 2048, 8, 14, 4, 448, 164109, 'amp_bf16', False),
    ('1b', 1024, 8, 18, 4, 576, 176898, 'amp_bf16', False),
    ('1b', 512, 8, 56, 4, 1792, 185186, 'amp_bf16', False),
    ('760m', 65536, 8, 1, 2, 16, 33150, 'amp_bf16', True),
    ('760m', 32768, 8, 1, 2, 16, 70417, 'amp_bf16', False),
    ('760m', 16384, 8, 3, 2, 48, 114198, 'amp_bf16', False),
    ('760m', 8192, 8, 6, 2, 96, 167471, 'amp_bf16', False),
    ('760m', 4096, 8, 12, 2, 192, 218808, 'amp_bf16', False),
    ('760m', 2048, 8, 24, 2, 384, 259472, 'amp_bf16', False),
    ('760m', 1024, 8, 48, 2, 768, 238122, 'amp_bf16', False),
    ('760m', 512, 8, 96, 2, 1536, 235571, 'amp_bf16', False),
    ('350m', 65536, 8, 1, 2, 16, 60195, 'amp_bf16', False),
    ('350m', 32768, 8, 2, 2, 32, 109222, 'amp_bf16', False),
    ('350m', 16384, 8, 4, 2, 64, 188478, 'amp_bf16', False),
    ('350m', 8192, 8, 8, 2, 128, 292559, 'amp_bf16', False),
    ('350m', 4096, 8, 16, 2, 256, 396442, 'amp_bf16', False),
    ('350m', 2048, 8, 32, 2, 512, 470263, 'amp_bf16', False),
    ('350m', 1024, 8, 64, 2, 1024, 518504, 'amp_bf16', False),
    ('350m', 512, 8, 128, 2, 2048, 554643, 'amp_bf16', False),
    ('125m', 65536, 8, 1, 2, 16, 162946, 'amp_bf16', False),
    ('125m', 32768, 8, 2, 2, 32, 291256, 'amp_bf16', False),
    ('125m', 16384, 8, 4, 2, 64, 480322, 'amp_bf16', False),
    ('125m', 8192, 8, 8, 2, 128, 723142, 'amp_bf16', False),
    ('125m', 4096, 8, 16, 2, 256, 947172, 'amp_bf16', False),
    ('125m', 2048, 8, 40, 2, 640, 1142641, 'amp_bf16', False),
    ('125m', 2048, 8, 32, 2, 512, 1133901, 'amp_bf16', False),
    ('125m', 1024, 8, 64, 2, 1024, 1251751, 'amp_bf16', False),
    ('125m', 512, 8, 128, 2, 2048, 1325455, 'amp_bf16', False),
]

extra = extra_sets(sys.argv[1:])


def sets(row):
    model, seq, gpus, mbs, _, gbs, _, _, ckpt = row
    h, heads, layers = SHAPES[model]
    s = ['model.hidden=%d' % h, 'model.heads=%d' % heads, 'model.kv_heads=%d' % heads, 'model.layers=%d' % layers,
         'model.ffn_hidden=%d' % (4 * h), 'model.seq_len=%d' % seq, 'parallel.micro_batch=%d' % mbs,
         'training.global_batch=%d' % gbs, 'parallel.dp=%d' % gpus, 'cluster.nodes=%d' % max(1, gpus // 8)]
    if ckpt:
        s.append('training.recompute=full')
    return s + extra


with cf.ThreadPoolExecutor(max_workers=2) as pool:
    results = list(pool.map(lambda r: run_json(BASE, sets(r)), ROWS))

print('%-5s %6s %5s %4s %11s %11s %8s  %s' % ('model', 'seq', 'GPUs', 'mbs', 'published', 'predicted', 'error', ''))
errors = {}
held = []
for row, (res, why) in zip(ROWS, results):
    model, seq, gpus, mbs, _, _, published, _, ckpt = row
    case = (model, seq, gpus, mbs) in CASES
    mark = ('case' if case else '') + (' checkpointed' if ckpt else '')
    if res is None:
        print('%-5s %6d %5d %4d %11d %11s %8s  %s %s' % (model, seq, gpus, mbs, published, '-', '-', mark, why))
        continue
    e = 100.0 * (res['tokens_per_s'] / published - 1.0)
    print('%-5s %6d %5d %4d %11d %11.0f %+7.1f%%  %s' % (model, seq, gpus, mbs, published, res['tokens_per_s'], e,
                                                       mark))
    if not case:
        held.append(abs(e))
        errors.setdefault(model, []).append(e)
print()
for model in SHAPES:
    if model in errors:
        v = errors[model]
        print('%-5s %2d held-out rows: %+6.1f ... %+6.1f %%, mean %+6.1f %%' % (model, len(v), min(v), max(v),
                                                                            sum(v) / len(v)))
print('held out: %d rows, mean absolute error %.2f %%' % (len(held), sum(held) / max(1, len(held))))
