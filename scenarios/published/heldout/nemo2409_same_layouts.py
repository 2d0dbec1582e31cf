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
the stack and its recipe together. Run from the repository root after ./setup.sh (about a minute):
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


def reference(path):
    """The case's own reference step time (seconds), read from its file."""
    ref = None
    for line in open(path):
        s = line.strip()
        if s.startswith('value:'):
            ref = float(s.split()[1])
    return ref


def main(argv):
    extra = extra_sets(argv)
    print('%-26s %12s %12s %10s %12s %12s' % ('24.09 row', '24.09 (s)', '24.12 (s)', '24.09/24.12', 'model (s)',
                                              'vs 24.09 / 24.12'))
    for name, (row, tokens_per_gpu) in ROWS.items():
        path = os.path.join(TRAINING, name)
        d, why = run_json(path, extra)
        if d is None:
            print('%-26s not run: %s' % (row, why))
            continue
        seq = d['tokens_per_s'] * d['iteration_time_s'] / d['global_batch']
        old = d['global_batch'] * seq / (tokens_per_gpu * d['gpus'])
        new = reference(path)
        t = d['iteration_time_s']
        print('%-26s %12.3f %12.3f %10.3f %12.3f %+7.1f %% / %+5.1f %%' % (row, old, new, old / new, t,
                                                                          100 * (t / old - 1), 100 * (t / new - 1)))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
