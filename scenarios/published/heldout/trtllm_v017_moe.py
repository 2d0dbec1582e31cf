#!/usr/bin/env python3
"""TensorRT-LLM's v0.17 throughput table (perf-overview.md, commit 258c754), its mixture-of-experts
rows: Mixtral 8x7B at TP 1, 2, 4, 8 and Mixtral 8x22B at TP 8, FP8 on H200 and H100, FP16 on A100.
Each row runs from the Llama 3.1 8B case file of its GPU with the model, TP and lengths set, as
trtllm_v017.py does for the Llama rows. Run from the repository root after ./setup.sh:
    python3 scenarios/published/heldout/trtllm_v017_moe.py [--set key=value ...]"""
import concurrent.futures as cf
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
LENGTHS = [(128, 128), (128, 2048), (128, 4096), (500, 2000), (1000, 1000), (2048, 128), (2048, 2048),
           (5000, 500), (20000, 2000)]
REQUESTS = {(128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (2048, 128): 3000, (2048, 2048): 1500,
            (5000, 500): 1500, (1000, 1000): 3000, (500, 2000): 3000, (20000, 2000): 1000}
# (model, tp) -> {gpu: published tokens/s for LENGTHS in order}
TABLE = {
    ('8x7B', 1): {'H200': [17157.72, 15095.21, 9534.62, 12105.27, 10371.36, 2009.67, 6940.32, 2309.1, 1151.78],
                  'H100': [15962.49, 8290.13, 4784.86, 6800.6, 6868.52, 1892.81, 3983.1, 1764.7, 673.7]},
    ('8x7B', 2): {'H200': [27825.34, 29584.05, 21564.68, 23410.63, 19151.19, 3383.16, 14007.29, 4223.68, 2299.21],
                  'H100': [27451.13, 22830.08, 14237.01, 17036.04, 15770.89, 3333.68, 10685.85, 3646.09, 1757.45],
                  'A100': [5541.47, 4169.78, 2608.05, 3446.37, 3154.52, 649, 2056.58, 724.44, 337.51]},
    ('8x7B', 4): {'H200': [42551.59, 52291.78, 39513.73, 43818.99, 33580.9, 5467.62, 24980.93, 7084.94, 4236.84],
                  'H100': [41068.23, 41164.73, 27912.48, 34489.34, 27784.74, 5234.98, 19432.08, 6401.56, 3303.83],
                  'A100': [10324.28, 10911.86, 7666.51, 8456.21, 7122.84, 1237.62, 5222.98, 1500.55, 829.59]},
    ('8x7B', 8): {'H200': [53212.55, 68608.45, 54827.78, 58706.39, 44705.48, 7554.38, 36193.64, 10271.8, 6835.53],
                  'H100': [50849.55, 61607.7, 48280.37, 52583.65, 40631.71, 6988.18, 30983.35, 9210.11, 5602.43],
                  'A100': [17043.54, 20277.88, 15282.89, 17184.24, 12851.44, 2165.52, 9809.76, 2761.28, 1592.53]},
    ('8x22B', 8): {'H200': [22948.57, 32415.81, 25753.14, 27429.6, 19712.35, 2899.84, 15798.59, 4031.79, 2815.76],
                   'H100': [21876.08, 25150.03, 18387.4, 21421.86, 16573.24, 2794.97, 12244.93, 3645.27, 2227.63],
                   'A100': [6381.95, 6685.99, 4789.13, 5648.46, 4549.46, 761.56, 3521.98, 959.14, 575.02]},
}
BASE = {'H200': 'trtllm-v0.17-llama3.1-8b-fp8-h200-tp1-isl1000-osl1000.yaml',
        'H100': 'trtllm-v0.17-llama3.1-8b-fp8-h100-tp1-isl128-osl128.yaml',
        'A100': 'trtllm-v0.17-llama3.1-8b-fp16-a100-tp1-isl128-osl128.yaml'}
# Mixtral 8x22B (Mistral AI's config.json): 56 layers, hidden 6144, 48 heads, 8 KV heads, experts of 16,384,
# vocabulary 32,768; 8 experts, top 2, as 8x7B.
SHAPE = {'8x7B': ['model.preset=mixtral-8x7b'],
         '8x22B': ['model.preset=mixtral-8x7b', 'model.layers=56', 'model.hidden=6144', 'model.heads=48',
                   'model.kv_heads=8', 'model.ffn_hidden=16384', 'model.moe.expert_ffn_hidden=16384',
                   'model.vocab=32768']}
args = sys.argv[1:]
extra = [args[i + 1] for i in range(len(args) - 1) if args[i] == '--set']


def run(job):
    model, tp, gpu, (isl, osl), published = job
    cmd = [os.path.join(ROOT, 'build', 'clustersim'), 'run',
           os.path.join(ROOT, 'scenarios', 'published', 'serving', BASE[gpu]), '--json']
    sets = SHAPE[model] + [f'parallel.tp={tp}', f'cluster.gpus_per_node={tp}', f'model.seq_len={max(8192, isl + osl)}',
                           f'inference.prompt_tokens.value={isl}', f'inference.output_tokens.value={osl}',
                           f'inference.requests={REQUESTS[(isl, osl)]}']
    for s in sets + extra:
        cmd += ['--set', s]
    p = subprocess.run(cmd, capture_output=True, text=True)
    try:
        v = json.loads(p.stdout)['throughput_tokens_per_s']
        return job + ((v - published) / published * 100, '')
    except (ValueError, KeyError):
        return job + (None, (p.stderr or p.stdout).strip().splitlines()[-1:])


jobs = [(m, tp, g, lens, pub) for (m, tp), gpus in TABLE.items() for g, row in gpus.items()
        for lens, pub in zip(LENGTHS, row)]
with cf.ThreadPoolExecutor(2) as ex:
    results = list(ex.map(run, jobs))
errors = []
for model, tp, gpu, (isl, osl), pub, err, why in results:
    if err is None:
        print(f'Mixtral {model} tp{tp} {gpu} {isl}/{osl} {pub} refused: {why}')
    else:
        print(f'Mixtral {model} tp{tp} {gpu} {isl}/{osl} {pub} {err:+.1f}')
        errors.append(err)
if errors:
    print('rows %d  mean|err| %.2f  mean %+.2f' % (len(errors), sum(map(abs, errors)) / len(errors),
                                                  sum(errors) / len(errors)))
