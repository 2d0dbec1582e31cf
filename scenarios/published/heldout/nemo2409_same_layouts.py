#!/usr/bin/env python3
"""NeMo 24.09's FP8 pre-training table against the same layouts three months later.

NVIDIA's NeMo Framework performance summary for the 24.09 release
(docs.nvidia.com/nemo-framework/user-guide/24.09/performance/performance_summary.html, "Pretraining", FP8) gives
tokens a second a GPU for layouts that NVIDIA's DGX Cloud benchmarking release v25.02 (NeMo 24.12) measured again:
Llama 3 8B on 8 GPUs (GBS 128, MBS 1, seq 8192, TP 1, PP 1, CP 2), Llama 3 70B on 64 (GBS 128, MBS 1, seq 8192,
TP 4, PP 4, CP 2, VP 5) and Nemotron-4 340B on 128 (GBS 32, MBS 1, seq 4096, TP 8, PP 8, VP 12). The v25.02 rows
are cases here (scenarios/published/training/dgxc2502-*-fp8.yaml). This script runs those case files unchanged and
sets each against both releases' step times: the 24.09 row's tokens over its rate (GBS x seq / (tokens a second a
GPU x GPUs)) and the case's own reference. The 24.09 page names the layout only; what else its recipes set (FP8
scaling, FP8 weights, the gradients' reduction type) is not stated, so a difference between the two releases is
the stack and its recipe together. The same table's Llama 2 rows (7B on 8 GPUs at TP 1; 13B on 16 at TP 1, PP 4, VP 10;
70B on 64 at TP 4, PP 4, VP 20; GBS 128, MBS 1, seq 4096) have no 24.12 twin: they run from the Llama 3 8B and 70B
case files with the row's layout and Llama 2's shape set (hidden, layers, heads, KV heads, FFN, the 32,000-token
vocabulary), so they carry the 24.12 recipe's other settings, an assumption the first three rows do not need.
Run from the repository root after ./setup.sh (a few seconds):
    python3 scenarios/published/heldout/nemo2409_same_layouts.py [--set key=value ...]"""
import os, sys

from heldout_run import ROOT, extra_sets, run_json

TRAINING = os.path.join(ROOT, 'scenarios', 'published', 'training')
# case file -> (the 24.09 row's name, its tokens a second a GPU)
ROWS = {
    'dgxc2502-llama3.1-8b-8xh100-fp8.yaml': ('LLAMA3-8B, 8 GPUs', 12273),
    'dgxc2502-llama3.1-70b-64xh100-fp8.yaml': ('LLAMA3-70B, 64 GPUs', 1524),
    'dgxc2502-nemotron4-340b-128xh100-fp8.yaml': ('Nemotron-340B, 128 GPUs', 326),
}


# 24.09 rows with no 24.12 twin: (row, its tokens a second a GPU, case file, --set pairs)
LLAMA2 = [
    ('LLAMA2-7B, 8 GPUs', 16934, 'dgxc2502-llama3.1-8b-8xh100-fp8.yaml',
     ['model.hidden=4096', 'model.layers=32', 'model.heads=32', 'model.kv_heads=32', 'model.ffn_hidden=11008',
      'model.vocab=32000', 'model.seq_len=4096', 'parallel.cp=1', 'parallel.dp=8']),
    ('LLAMA2-13B, 16 GPUs', 8715, 'dgxc2502-llama3.1-8b-8xh100-fp8.yaml',
     ['cluster.nodes=2', 'model.hidden=5120', 'model.layers=40', 'model.heads=40', 'model.kv_heads=40',
      'model.ffn_hidden=13824', 'model.vocab=32000', 'model.seq_len=4096', 'parallel.cp=1', 'parallel.pp=4',
      'parallel.schedule=interleaved-1f1b', 'parallel.virtual_stages=10', 'parallel.dp=4']),
    ('LLAMA2-70B, 64 GPUs', 1728, 'dgxc2502-llama3.1-70b-64xh100-fp8.yaml',
     ['model.vocab=32000', 'model.seq_len=4096', 'parallel.cp=1', 'parallel.virtual_stages=20', 'parallel.dp=4']),
]


def reference(path):
    """The case's own reference step time (seconds), read from its file."""
    ref = None
    for line in open(path):
        s = line.strip()
        if s.startswith('value:'):
            ref = float(s.split()[1])
    return ref


def run_row(name, sets, tokens_per_gpu):
    """(the model's result, the 24.09 row's step time), or (None, why the model gave none)."""
    d, why = run_json(os.path.join(TRAINING, name), sets)
    if d is None:
        return None, why
    seq = d['tokens_per_s'] * d['iteration_time_s'] / d['global_batch']
    return d, d['global_batch'] * seq / (tokens_per_gpu * d['gpus'])


def main(argv):
    extra = extra_sets(argv)
    print('%-26s %12s %12s %10s %12s %12s' % ('24.09 row', '24.09 (s)', '24.12 (s)', '24.09/24.12', 'model (s)',
                                              'vs 24.09 / 24.12'))
    for name, (row, tokens_per_gpu) in ROWS.items():
        d, old = run_row(name, extra, tokens_per_gpu)
        if d is None:
            print('%-26s not run: %s' % (row, old))
            continue
        new = reference(os.path.join(TRAINING, name))
        t = d['iteration_time_s']
        print('%-26s %12.3f %12.3f %10.3f %12.3f %+7.1f %% / %+5.1f %%' % (row, old, new, old / new, t,
                                                                          100 * (t / old - 1), 100 * (t / new - 1)))
    print()
    print('%-26s %12s %12s %12s' % ('24.09 row (no 24.12 twin)', '24.09 (s)', 'model (s)', 'vs 24.09'))
    for row, tokens_per_gpu, name, sets in LLAMA2:
        d, old = run_row(name, sets + extra, tokens_per_gpu)
        if d is None:
            print('%-26s not run: %s' % (row, old))
            continue
        t = d['iteration_time_s']
        print('%-26s %12.3f %12.3f %+10.1f %%' % (row, old, t, 100 * (t / old - 1)))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
