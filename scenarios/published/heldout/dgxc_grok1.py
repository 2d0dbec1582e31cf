#!/usr/bin/env python3
"""NVIDIA DGX Cloud Benchmarking v25.02 (github.com/NVIDIA/dgxc-benchmarking, tag v25.02, grok1/README_314b.md,
"Expected Performance"): Grok 1 314B, a mixture of experts (8 experts, top 2), pre-trained on 8 to 2,048 H100 in
NeMo 24.12, seconds per step in BF16 and FP8 at every size of the recipe's table.

The rows run the 512-GPU case files (dgxc2502-grok1-314b-512xh100-{bf16,fp8}.yaml, which are cases of the
published set) with what grok1/configure.sh changes with the node count: below 64 nodes the model is a proxy with
fewer layers (2 on one node, 4 on two and four, 8 on eight, 16 and 32 on 16 and 32 nodes) and a smaller pipeline
(PP 1, 1, 1, 1, 2, 4 with VP 8 where PP > 1); up to four nodes the sequence is 4,096 tokens without CP, and EP is 2
on one node and 4 on two; GBS is 1,024 up to 64 nodes, then 16 sequences a node. DP = GPUs / (TP·PP·CP), EP
carved out of DP×CP.
Not expressed: overlap_param_gather_with_optimizer_step (on where PP > 1), as in the case files.
Run from the repository root after ./setup.sh (about two minutes on two cores):
    python3 scenarios/published/heldout/dgxc_grok1.py [--set key=value ...]"""
import os, sys, concurrent.futures as cf

from heldout_run import ROOT, extra_sets, memory_refusal, run_json

TRAINING = os.path.join(ROOT, 'scenarios', 'published', 'training')
CASE = {d: os.path.join(TRAINING, 'dgxc2502-grok1-314b-512xh100-%s.yaml' % d) for d in ('bf16', 'fp8')}
# GPUs -> (BF16, FP8) seconds per step, grok1/README_314b.md (v25.02)
PUBLISHED = {8: (24.00, 19.71), 16: (21.71, 17.80), 32: (10.70, 8.70), 64: (21.42, 17.53), 128: (20.73, 16.70),
             256: (20.83, 16.75), 512: (21.01, 16.90), 1024: (21.20, 17.01), 2048: (21.29, 17.30)}
# GPUs -> (layers, PP, CP, EP, seq), grok1/configure.sh
LAYOUT = {8: (2, 1, 1, 2, 4096), 16: (4, 1, 1, 4, 4096), 32: (4, 1, 1, 8, 4096), 64: (8, 1, 2, 8, 8192),
          128: (16, 2, 2, 8, 8192), 256: (32, 4, 2, 8, 8192), 512: (64, 8, 2, 8, 8192),
          1024: (64, 8, 2, 8, 8192), 2048: (64, 8, 2, 8, 8192)}

extra = extra_sets(sys.argv[1:])


def sets_for(gpus):
    layers, pp, cp, ep, seq = LAYOUT[gpus]
    nodes = gpus // 8
    sets = ['cluster.nodes=%d' % nodes, 'model.layers=%d' % layers, 'model.seq_len=%d' % seq,
            'parallel.pp=%d' % pp, 'parallel.cp=%d' % cp, 'parallel.ep=%d' % ep,
            'parallel.dp=%d' % (gpus // (4 * pp * cp)), 'training.global_batch=%d' % max(1024, 16 * nodes)]
    if pp == 1:
        sets += ['parallel.schedule=1f1b', 'parallel.virtual_stages=1']
    return sets


def run(job):
    dtype, gpus = job
    d, why = run_json(CASE[dtype], sets_for(gpus) + extra)
    return job, d, why


def main():
    jobs = [(dtype, gpus) for dtype in ('bf16', 'fp8') for gpus in sorted(PUBLISHED)]
    with cf.ThreadPoolExecutor(max_workers=2) as ex:
        results = {job: (d, why) for job, d, why in ex.map(run, jobs)}
    print('Grok 1 314B on H100 (DGX Cloud v25.02, NeMo 24.12): seconds per step, published against the model')
    print('%-5s %6s %9s %9s %8s' % ('dtype', 'GPUs', 'published', 'model', 'error'))
    errs = {'bf16': [], 'fp8': []}
    for dtype, gpus in jobs:
        pub = PUBLISHED[gpus][0 if dtype == 'bf16' else 1]
        d, why = results[(dtype, gpus)]
        if d is None:
            need = memory_refusal(why)
            print('%-5s %6d %9.2f   refused: %s' % (dtype, gpus, pub, 'memory %s of %s' % need if need else why))
            continue
        t = d['iteration_time_s']
        err = 100.0 * (t - pub) / pub
        errs[dtype].append(err)
        print('%-5s %6d %9.2f %9.2f %+7.1f%%%s' % (dtype, gpus, pub, t, err, '  (case)' if gpus == 512 else ''))
    for dtype in ('bf16', 'fp8'):
        e = errs[dtype]
        if e:
            print('%s: mean |error| %.1f %% over %d rows (signed %+.1f %%)' %
                  (dtype, sum(abs(x) for x in e) / len(e), len(e), sum(e) / len(e)))
    ratios = []
    for gpus in sorted(PUBLISHED):
        b, f = results[('bf16', gpus)][0], results[('fp8', gpus)][0]
        if b and f:
            ratios.append((gpus, PUBLISHED[gpus][0] / PUBLISHED[gpus][1],
                           b['iteration_time_s'] / f['iteration_time_s']))
    print('FP8 speed-up (BF16 step / FP8 step), published against the model:')
    for gpus, pub, mod in ratios:
        print('  %5d GPUs  %.3f  %.3f' % (gpus, pub, mod))


if __name__ == '__main__':
    main()
