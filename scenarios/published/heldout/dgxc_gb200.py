#!/usr/bin/env python3
"""NVIDIA DGX Cloud Benchmarking v25.05 (github.com/NVIDIA/dgxc-benchmarking, tag v25.05, llama3.1/README.md,
"Expected Performance"): Llama 3.1 405B pre-training on 128, 256 and 512 GB200 (NeMo 25.04.01, the release's
llmb-nemo commit 7a8f1cc), seconds per step, BF16 and FP8, weak-scaled at TP 4, PP 8, CP 2, VP 8, micro-batch 1,
GBS = GPUs / 2, sequence 8,192 ("analyze iterations 11-44 and calculate mean").

The rows run the B200 405B case file (mbridge2511-llama3-405b-128xb200-fp8.yaml: the same layout, and the same
userbuffers configuration NeMo 25.04's scripts/performance/llm/pretrain_llama31_405b.py gives the GB200,
userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192) with what the release changes:
  - the cluster: GB200 NVL72 racks, the GPUs as 64-GPU NVLink domains (the job's TP x PP x CP);
  - FP8: scripts/performance/utils.py's default recipe "ds", bf16_with_fp8_mixed (delayed scaling, fp8_param_gather
    True), grad_reduce_in_fp32 False, as the case file has it apart from the recipe;
  - BF16: bf16_mixed with the 405B recipe's pretrain_performance_optimizations, which sets the plugin's
    grad_reduce_in_fp32 False for every precision (nemo/collections/llm/recipes/llama31_405b.py at 7a8f1cc; the
    strategy copies it into the DDP config), so gradients are kept and reduced in BF16 as in the case file; and
    userbuffers_bf16_b200_h16384_tp4_cp2_mbs1_seqlen8192 (proj_fprop and fc2_fprop pipelined on 32 and 8 SMs with
    the SM margin, qkv_wgrad 24 SMs, fc1_wgrad 2).
Not expressed: use_precision_aware_optimizer (BF16; set_primary_perf_configs in scripts/performance/utils.py at
7a8f1cc, its state dtypes left at FP32) and the job's placement on 72-GPU racks.

The same release's Nemotron-4 340B FP8 rows on GB200 (nemotron/README.md: TP 8, PP 4, VP 12, micro-batch 1; weak
scaling at GBS = GPUs / 4, 1.483 / 1.517 / 1.549 s on 128 / 256 / 512 GPUs, and strong scaling at GBS 512, 21.83 /
11.21 / 5.668 s; `--cuda_graphs true` on GB200) run the H100 340B case file (dgxc2502-nemotron4-340b-128xh100-fp8.yaml)
with NeMo 25.04's settings where they differ from v25.02's: the distributed optimizer (ZeRO 1), no activation recompute,
the default attention backend, userbuffers_fp8_b200_h18432_tp8_mbs1_seqlen4096 (ring-exchange reduce-scatters; bulk
overlaps of 8, 32, 2 and 8 SMs). Its BF16 rows are left out: their configuration pipelines FC2's reduce-scatter and
ring-exchanges the projection's, which one key cannot say.

The same release's two H100 rows (512 GPUs, TP 8, PP 8, CP 2, VP 8, GBS 256: 19.810 s BF16, 13.020 s FP8) run the
H100 405B case file (mbridge2511-llama3-405b-1024xh100-fp8.yaml, the NeMo configuration's userbuffers for H100) on
64 nodes, with the same recipe changes (BF16: userbuffers_bf16_h100_h16384_tp8_cp2_mbs1_seqlen8192, proj_fprop and
fc2_fprop pipelined on 24 and 8 SMs).

The GPUs sit in 64-GPU NVLink domains (how the runs sat on 72-GPU racks is not stated). The pipeline group spans
domains at every size, so its sends and receives run on NCCL's network channel count (docs/model.md, "Kernels beside
communication").

Each GB200 row runs with the preset's power model (a B200's sustained rate, 1,000 W) and with the board's 1,200 W
rating (1,765 TFLOP/s at the cap), docs/model.md "Clocks under the power cap". Run from the repository root after
./setup.sh (about a minute on two cores):
    python3 scenarios/published/heldout/dgxc_gb200.py [--set key=value ...]"""
import os, sys, concurrent.futures as cf

from heldout_run import ROOT, extra_sets, memory_refusal, run_json

TRAINING = os.path.join(ROOT, 'scenarios', 'published', 'training')
BASE = os.path.join(TRAINING, 'mbridge2511-llama3-405b-128xb200-fp8.yaml')
H100 = os.path.join(TRAINING, 'mbridge2511-llama3-405b-1024xh100-fp8.yaml')
# (precision, GPUs) -> seconds per step, v25.05 llama3.1/README.md
PUBLISHED = {('bf16', 128): 9.347, ('bf16', 256): 9.484, ('bf16', 512): 9.508,
             ('fp8', 128): 6.131, ('fp8', 256): 6.183, ('fp8', 512): 6.244}
H100_PUBLISHED = {'bf16': 19.810, 'fp8': 13.020}  # 512 H100
NEMOTRON = os.path.join(TRAINING, 'dgxc2502-nemotron4-340b-128xh100-fp8.yaml')
# (GPUs, GBS) -> seconds per step, v25.05 nemotron/README.md, Nemotron 340b FP8 GB200 (weak, then strong scaling)
NEMOTRON_PUBLISHED = {(128, 32): 1.483, (256, 64): 1.517, (512, 128): 1.549,
                      (128, 512): 21.83, (256, 512): 11.21, (512, 512): 5.668}
NEMOTRON_SETS = ['cluster.preset=dgx-gb200-nvl72', 'cluster.gpus_per_node=64', 'parallel.pp=4',
                 'parallel.virtual_stages=12', 'parallel.zero_stage=1',
                 'parallel.tp_overlap_reduce_scatter=ring-exchange', 'parallel.tp_overlap_qkv_dgrad_sms=8',
                 'parallel.tp_overlap_qkv_wgrad_sms=32', 'parallel.tp_overlap_fc1_dgrad_sms=2',
                 'parallel.tp_overlap_fc1_wgrad_sms=8', 'training.recompute=none', 'training.attention=flash']
H100_BF16 = ['model.dtype=bf16', 'training.fp8_recipe=delayed', 'parallel.fp8_param_gather=false',
             'parallel.tp_overlap_reduce_scatter=pipeline',
             'parallel.tp_overlap_proj_sms=24', 'parallel.tp_overlap_fc2_sms=8',
             'parallel.tp_overlap_sm_margin=true']
FP8 = ['training.fp8_recipe=delayed']
BF16 = ['model.dtype=bf16', 'training.fp8_recipe=delayed', 'parallel.fp8_param_gather=false',
        'parallel.tp_overlap_reduce_scatter=pipeline',
        'parallel.tp_overlap_proj_sms=32', 'parallel.tp_overlap_fc2_sms=8', 'parallel.tp_overlap_sm_margin=true',
        'parallel.tp_overlap_qkv_wgrad_sms=24', 'parallel.tp_overlap_fc1_wgrad_sms=2']
RATED = ['cluster.gpu_spec.power_limit=1200', 'cluster.gpu_spec.capped_bf16_tflops=1765']  # the board's rating

extra = extra_sets(sys.argv[1:])


def sets_for(dtype, gpus):
    domains = gpus // 64
    return (['cluster.preset=dgx-gb200-nvl72', 'cluster.gpus_per_node=64', 'cluster.nodes=%d' % domains,
             'parallel.dp=%d' % domains, 'training.global_batch=%d' % (gpus // 2)] +
            (FP8 if dtype == 'fp8' else BF16))


def run(job):
    path, sets = job
    d, why = run_json(path, sets + extra)
    if d is not None:
        return d['iteration_time_s'], ''
    need = memory_refusal(why)
    return None, ('the memory model refuses it: %s a GPU needed, %s available (the run fit)' % need if need
                  else why.split('error: ')[-1][:120])


keys = sorted(PUBLISHED)
h100_sets = {'fp8': ['cluster.nodes=64', 'parallel.dp=4', 'training.global_batch=256', 'training.fp8_recipe=delayed'],
             'bf16': ['cluster.nodes=64', 'parallel.dp=4', 'training.global_batch=256'] + H100_BF16}
nkeys = list(NEMOTRON_PUBLISHED)
nemotron_sets = {(n, g): NEMOTRON_SETS + ['cluster.nodes=%d' % (n // 64), 'parallel.dp=%d' % (n // 32),
                                         'training.global_batch=%d' % g] for n, g in nkeys}
jobs = ([(BASE, sets_for(d, g)) for d, g in keys] + [(BASE, sets_for(d, g) + RATED) for d, g in keys] +
        [(H100, h100_sets[d]) for d in ('bf16', 'fp8')] + [(NEMOTRON, nemotron_sets[k]) for k in nkeys] +
        [(NEMOTRON, nemotron_sets[k] + RATED) for k in nkeys])
with cf.ThreadPoolExecutor(2) as ex:
    out = list(ex.map(run, jobs))
n = len(keys)
own, b200, h100 = out[:n], out[n:2 * n], out[2 * n:2 * n + 2]
nem, nem_rated = out[2 * n + 2:2 * n + 2 + len(nkeys)], out[2 * n + 2 + len(nkeys):]

print('%-16s %9s %9s %8s %14s %8s' % ('row', 'published', 'model', 'error', "at 1,200 W", 'error'))
errs = {'own': [], 'b200': []}
for (dtype, gpus), (t, why), (tb, _) in zip(keys, own, b200):
    pub = PUBLISHED[(dtype, gpus)]
    if t is None:
        print('%-16s %9.3f %s' % ('%s %d GPUs' % (dtype.upper(), gpus), pub, why))
        continue
    e = 100 * (t / pub - 1)
    errs['own'].append(abs(e))
    line = '%-16s %9.3f %9.3f %+7.1f%%' % ('%s %d GPUs' % (dtype.upper(), gpus), pub, t, e)
    if tb is not None:
        eb = 100 * (tb / pub - 1)
        errs['b200'].append(abs(eb))
        line += ' %14.3f %+7.1f%%' % (tb, eb)
    print(line)
for k, name in (('own', 'the preset (1,000 W)'), ('b200', 'the 1,200 W rating')):
    if errs[k]:
        print('mean absolute error in step time with %s: %.1f %% (%d rows)' % (name, sum(errs[k]) / len(errs[k]),
                                                                            len(errs[k])))
for d, (t, why) in zip(('bf16', 'fp8'), h100):
    pub = H100_PUBLISHED[d]
    if t is None:
        print('%-16s %9.3f %s' % ('H100 %s 512' % d.upper(), pub, why))
    else:
        print('%-16s %9.3f %9.3f %+7.1f%%' % ('H100 %s 512' % d.upper(), pub, t, 100 * (t / pub - 1)))
print()
print('%-30s %9s %9s %8s %14s %8s' % ('Nemotron-4 340B FP8, GB200', 'published', 'model', 'error', 'at 1,200 W',
                                      'error'))
errs = []
for (gpus, gbs), (t, why), (tr, _) in zip(nkeys, nem, nem_rated):
    pub = NEMOTRON_PUBLISHED[(gpus, gbs)]
    label = '%d GPUs, GBS %d' % (gpus, gbs)
    if t is None:
        print('%-30s %9.3f %s' % (label, pub, why))
        continue
    errs.append(abs(100 * (t / pub - 1)))
    line = '%-30s %9.3f %9.3f %+7.1f%%' % (label, pub, t, 100 * (t / pub - 1))
    if tr is not None:
        line += ' %14.3f %+7.1f%%' % (tr, 100 * (tr / pub - 1))
    print(line)
if errs:
    print('mean absolute error in step time: %.1f %% (%d rows)' % (sum(errs) / len(errs), len(errs)))
