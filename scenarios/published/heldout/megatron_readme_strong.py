#!/usr/bin/env python3
"""The Megatron-LM README's strong-scaling chart (images/strong_scaling.png, Megatron-Core r0.8.0): the GPT 177B
model of the weak-scaling table (96 layers, hidden 12288, 96 heads, vocab 131,072, seq 4,096) at a fixed batch of
1,152 sequences from 96 to 4,608 H100. The README's text gives the ends, MFU 47 % at 96 GPUs and 42 % at 4,608; the
points between are read off the chart (log-log axes, its grid lines at 100, 500, 1,000, 5,000 GPUs and 50, 100, 500,
1,000 PFLOP/s; aggregate PFLOP/s over GPUs), which puts 2,304 GPUs at 434.7 TFLOP/s a GPU where the table has
432.8. The layout is the table's 177B row's, TP 8 and PP 6, so DP = GPUs / 48; micro-batch, schedule and virtual
stages are not stated, and every point is run over the same band as the table's row (its `reference.unstated`).
The chart's FLOPs are Megatron-Core r0.8.0's count (the whole attention square), so the model's iteration time is
turned into that count here. Run from the repository root after ./setup.sh (about four minutes on two cores):
    python3 scenarios/published/heldout/megatron_readme_strong.py [--set key=value ...]"""
import os, sys, concurrent.futures as cf

from heldout_run import ROOT, extra_sets, memory_refusal, run_json

BASE = os.path.join(ROOT, 'scenarios', 'published', 'training', 'megatron-core-h100-gpt-177b-2304xh100.yaml')
# GPUs -> TFLOP/s a GPU: the chart's aggregate PFLOP/s over its GPUs (the ends within the README's rounded MFU)
PUBLISHED = {96: 460.4, 144: 459.7, 288: 457.6, 576: 454.9, 1152: 448.1, 2304: 434.7, 3072: 426.0, 4608: 414.6}
# Megatron-Core r0.8.0's num_floating_point_operations for the batch:
#   12·B·s·l·h²·(1 + g/a + s/h + f/h) + 6·B·s·h·V
B, S, L, H, V, F = 1152, 4096, 96, 12288, 131072, 49152
FLOPS = 12 * B * S * L * H * H * (1 + 1 + S / H + F / H) + 6 * B * S * H * V
BAND = [(mb, 'interleaved-1f1b', v) for mb in (1, 2, 4) for v in (2, 4, 8)] + [(mb, '1f1b', 1) for mb in (1, 2, 4)]

extra = extra_sets(sys.argv[1:])


def headline():
    """The case file's own micro-batch, schedule and virtual stages, read from its run."""
    d, why = run_json(BASE, [])
    if d is None:
        sys.exit(why)
    v = d['virtual_stages']
    return d['global_batch'] // (d['dp'] * d['micro_batches']), 'interleaved-1f1b' if v > 1 else '1f1b', v


HEADLINE = headline()


def run(job):
    gpus, (mb, schedule, v) = job
    sets = ['cluster.nodes=%d' % (gpus // 8), 'parallel.dp=%d' % (gpus // 48), 'parallel.micro_batch=%d' % mb,
            'parallel.schedule=%s' % schedule, 'parallel.virtual_stages=%d' % v]
    d, why = run_json(BASE, sets + extra)
    if d is None:
        need = memory_refusal(why)
        return job, None, 'does not fit: %s a GPU' % need[0] if need else why.split('error: ')[-1][:120]
    return job, FLOPS / d['iteration_time_s'] / gpus / 1e12, ''


jobs = [(g, c) for g in PUBLISHED for c in BAND + ([HEADLINE] if HEADLINE not in BAND else [])]
with cf.ThreadPoolExecutor(2) as ex:
    results = list(ex.map(run, jobs))
by = {}
for (g, c), tf, err in results:
    if tf is None:
        print('%5d GPUs  mb %d %-16s v %d: not run (%s)' % (g, c[0], c[1], c[2], err))
    else:
        by.setdefault(g, {})[c] = tf


def err(a, b):
    return (a - b) / b * 100


print('\n%5s %9s | %9s %7s | %17s | %s' % ('GPUs', 'published', 'headline', 'error', 'band', 'reference'))
abs_head, inside = [], 0
for g, pub in PUBLISHED.items():
    row = by.get(g, {})
    if HEADLINE not in row:
        continue
    head = row[HEADLINE]
    lo, hi = min(row.values()), max(row.values())
    ok = lo <= pub <= hi
    inside += ok
    abs_head.append(abs(err(head, pub)))
    best = min(row, key=lambda c: abs(row[c] - pub))
    print('%5d %9.1f | %9.1f %+6.1f%% | %7.1f to %7.1f | %s (nearest: mb %d %s v %d, %+.1f%%)' % (
        g, pub, head, err(head, pub), lo, hi, 'inside' if ok else 'outside', best[0], best[1], best[2],
        err(row[best], pub)))
if abs_head:
    print('\nheadline (mb %d, %s, v %d): mean |error| %.1f %% over %d points; %d of %d points inside the band' % (
        HEADLINE[0], HEADLINE[1], HEADLINE[2], sum(abs_head) / len(abs_head), len(abs_head), inside, len(abs_head)))
first, last = min(PUBLISHED), max(PUBLISHED)
print('published %d -> %d GPUs: x%.3f a GPU' % (first, last, PUBLISHED[last] / PUBLISHED[first]))
for c in BAND:
    if c in by.get(first, {}) and c in by.get(last, {}):
        print('  model mb %d %-16s v %d: x%.3f (%.1f -> %.1f)' % (
            c[0], c[1], c[2], by[last][c] / by[first][c], by[first][c], by[last][c]))
