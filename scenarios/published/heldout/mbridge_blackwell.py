#!/usr/bin/env python3
"""Megatron-Bridge's Blackwell rows (docs/performance-summary-archive.md, the 25.09 and 25.11 NeMo containers) that
the 25.11 case files can express, and the GB200 against the B200 on the same layout. Held out: the 25.09 B200 and
GB200 8B and B200 405B rows (the case files as they are: the releases ran the same configuration), and the 25.11
GB200 405B row (256 GPUs, TP 4, PP 16, CP 1, VP 4, GBS 1,536: the B200 405B case file on four 64-GPU NVLink domains,
nothing else changed). The 25.11 rows that are cases are printed beside them for the pairs, marked.

Each GB200 row runs twice: with the preset's power model (a B200's sustained rate, 1,000 W and 1,420 TFLOP/s at the
cap, docs/model.md "Clocks under the power cap") and with the board's 1,200 W rating (1,765 TFLOP/s at the cap, the
same energy per FLOP). The archive's GB200/B200 pairs on one layout sit within -7...+5 % of each other. Run from
the repository root after ./setup.sh (about 15 seconds on two cores):
    python3 scenarios/published/heldout/mbridge_blackwell.py [--set key=value ...]"""
import os, sys, concurrent.futures as cf

from heldout_run import ROOT, extra_sets, run_json

CASES = os.path.join(ROOT, 'scenarios', 'published', 'training')
B200_8B = os.path.join(CASES, 'mbridge2511-llama3-8b-8xb200-fp8.yaml')
GB200_8B = os.path.join(CASES, 'mbridge2511-llama3-8b-8xgb200-fp8.yaml')
B200_405B = os.path.join(CASES, 'mbridge2511-llama3-405b-128xb200-fp8.yaml')
GB200_405B = ['cluster.preset=dgx-gb200-nvl72', 'cluster.nodes=4', 'cluster.gpus_per_node=64', 'parallel.pp=16',
              'parallel.cp=1', 'parallel.dp=4', 'parallel.virtual_stages=4', 'training.global_batch=1536']
RATED = ['cluster.gpu_spec.power_limit=1200', 'cluster.gpu_spec.capped_bf16_tflops=1765']  # the board's rating
# (label, file, sets, published tokens/s a GPU, GB200?, held out?)
ROWS = [
    ('25.09 B200 8B FP8-CS', B200_8B, [], 29994, False, True),
    ('25.09 GB200 8B FP8-CS', GB200_8B, [], 31357, True, True),
    ('25.11 B200 8B FP8-CS (case)', B200_8B, [], 30624, False, False),
    ('25.11 GB200 8B FP8-CS (case)', GB200_8B, [], 31508, True, False),
    ('25.09 B200 405B FP8-CS', B200_405B, [], 664, False, True),
    ('25.11 B200 405B FP8-CS (case)', B200_405B, [], 661, False, False),
    ('25.11 GB200 405B FP8-CS, TP 4 PP 16 VP 4', B200_405B, GB200_405B, 813, True, True),
]
# The archive's pairs on one layout, published: (label, GB200, B200) tokens/s a GPU.
PAIRS = [('25.11 8B FP8-CS', 31508, 30624), ('25.11 8B FP8-MX', 29789, 29521), ('25.09 8B FP8-CS', 31357, 29994),
         ('25.09 8B FP8-MX', 29925, 29388), ('25.09 405B FP8-MX, 128 GPUs, TP 4 PP 8 CP 2 VP 8', 578, 622)]

extra = extra_sets(sys.argv[1:])


def run(job):
    path, sets = job
    d, why = run_json(path, sets + extra)
    return (d['tokens_per_s'] / d['gpus'], '') if d is not None else (None, why)


jobs = []
for label, path, sets, pub, gb200, held in ROWS:
    jobs.append((path, sets))
    if gb200:
        jobs.append((path, sets + RATED))
with cf.ThreadPoolExecutor(2) as ex:
    out = dict(zip(range(len(jobs)), ex.map(run, jobs)))

print('%-44s %10s %10s %8s %14s %8s' % ('row', 'published', 'model', 'error', "at 1,200 W", 'error'))
k = 0
errors, model = [], {}
for label, path, sets, pub, gb200, held in ROWS:
    got, why = out[k]
    k += 1
    alt = None
    if gb200:
        alt, _ = out[k]
        k += 1
    if got is None:
        print('%-44s %10d %s' % (label, pub, why))
        continue
    model[label] = got
    err = 100 * (got / pub - 1)
    if held:
        errors.append(abs(err))
    line = '%-44s %10d %10.1f %+7.1f%%' % (label, pub, got, err)
    if alt is not None:
        line += ' %14.1f %+7.1f%%' % (alt, 100 * (alt / pub - 1))
    print(line)
if errors:
    print('held-out rows: %d, mean absolute error %.1f %%' % (len(errors), sum(errors) / len(errors)))
print()
print('GB200 over B200, same layout, published (the model where the case files express the pair):')
for label, gb, b in PAIRS:
    line = '  %-52s %.3f' % (label, gb / b)
    rel = label.split(' ')[0]
    if label.endswith('8B FP8-CS'):
        suffix = ' (case)' if rel == '25.11' else ''
        g = model.get('%s GB200 8B FP8-CS%s' % (rel, suffix))
        bb = model.get('%s B200 8B FP8-CS%s' % (rel, suffix))
        if g and bb:
            line += '   model %.3f' % (g / bb)
    print(line)
ratios = [gb / b for _, gb, b in PAIRS]
print('  mean %.3f' % (sum(ratios) / len(ratios)))
