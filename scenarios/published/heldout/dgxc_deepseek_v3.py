#!/usr/bin/env python3
"""NVIDIA DGX Cloud Benchmarking v25.05 (github.com/NVIDIA/dgxc-benchmarking, tag v25.05,
deepseek_v3/pretraining/README.md, "GB200 Performance"): DeepSeek-V3 671B pre-trained in BF16 on 128, 256 and 512
GB200 in NeMo 25.04.01, seconds per step.

The rows run the 1,024-H100 case file (dgxc2505-deepseek-v3-1024xh100-bf16.yaml, a case of the published set) with
what deepseek_v3/pretraining/launch.sh changes for GPU_TYPE gb200: TP 2, PP 4 (so the first stage holds 64/4 - 1 = 15
layers and the last 64/4 - 2 = 14, as NeMo's pretrain_deepseek_v3.py sets them), EP 32 on 128 GPUs and 64 above,
ETP 1, VP 1, selective recompute of the attention core (RM core_attn), GBS 8 a GPU, DP = GPUs / 8.
The launcher places 4 GPUs a Slurm node (GPUS_PER_NODE 4: a GB200 compute tray). Each row runs twice: with the
NVL72 rack's NVLink domain (64 GPUs a domain, as dgxc_gb200.py runs the same release's Llama rows) and with NVLink
inside each tray only, the trays joined by their InfiniBand NICs.
Run from the repository root after ./setup.sh (about a minute on two cores):
    python3 scenarios/published/heldout/dgxc_deepseek_v3.py [--set key=value ...]"""
import os, sys, concurrent.futures as cf

from heldout_run import ROOT, extra_sets, memory_refusal, run_json

CASE = os.path.join(ROOT, 'scenarios', 'published', 'training', 'dgxc2505-deepseek-v3-1024xh100-bf16.yaml')
PUBLISHED = {128: 34.168, 256: 34.194, 512: 34.274}  # GPUs -> seconds per step, GB200 BF16
DOMAINS = {'NVL domain of 64': 64, 'trays of 4': 4}

extra = extra_sets(sys.argv[1:])


def sets_for(gpus, per_node):
    return ['cluster.preset=dgx-gb200-nvl72', 'cluster.gpus_per_node=%d' % per_node,
            'cluster.nodes=%d' % (gpus // per_node), 'parallel.pp=4', 'parallel.ep=%d' % (32 if gpus == 128 else 64),
            'parallel.dp=%d' % (gpus // 8), 'training.global_batch=%d' % (8 * gpus),
            'parallel.first_stage_layers=15', 'parallel.last_stage_layers=14',
            'training.recompute_modules=[core_attn]']


def run(job):
    gpus, per_node = job
    d, why = run_json(CASE, sets_for(gpus, per_node) + extra)
    return job, d, why


def main():
    jobs = [(g, n) for n in DOMAINS.values() for g in sorted(PUBLISHED)]
    with cf.ThreadPoolExecutor(max_workers=2) as ex:
        results = {job: (d, why) for job, d, why in ex.map(run, jobs)}
    print('DeepSeek-V3 671B BF16 on GB200 (DGX Cloud v25.05, NeMo 25.04.01): seconds per step')
    print('%-18s %6s %9s %9s %8s %10s' % ('NVLink', 'GPUs', 'published', 'model', 'error', 'EP exposed'))
    for name, per_node in DOMAINS.items():
        errs = []
        for gpus in sorted(PUBLISHED):
            d, why = results[(gpus, per_node)]
            pub = PUBLISHED[gpus]
            if d is None:
                need = memory_refusal(why)
                print('%-18s %6d %9.2f   refused: %s' % (name, gpus, pub, 'memory %s of %s' % need if need else why))
                continue
            t = d['iteration_time_s']
            errs.append(100.0 * (t - pub) / pub)
            print('%-18s %6d %9.2f %9.2f %+7.1f%% %9.2f s' % (name, gpus, pub, t, errs[-1], d['exposed_comm_ep_s']))
        if errs:
            print('%s: mean |error| %.1f %% over %d rows' % (name, sum(abs(e) for e in errs) / len(errs), len(errs)))


if __name__ == '__main__':
    main()
