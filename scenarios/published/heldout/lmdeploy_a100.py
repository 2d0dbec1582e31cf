#!/usr/bin/env python3
"""LMDeploy's static inference benchmark on A100-80G, FP16 (docs/en/benchmark/a100_fp16.md at InternLM/lmdeploy
commit 3e391df, lmdeploy v0.1.0a1, TurboMind, `benchmark/profile_generation.py`): every row of its four tables,
Llama 2 7B and 13B (TP 1), InternLM-20B (TP 2) and Llama 2 70B (TP 4), at batch 1, 16, 32 and 64 and five prompt /
output lengths, 80 rows (six of them are cases in scenarios/published/serving). Each row runs from the 70B batch-64
case file with the row's model, tensor parallelism, batch and lengths set. Published figures: throughput (output
tokens/s) and the per-token latency's median (the harness's 50 % column, decode tokens only), transcribed from the
table. Rows with 2,048-token prompts and batch > 1 mix the stalls of later prompts' prefills into that median (the
harness's threads send their prompts one by one), which the model's simultaneous requests do not have: their median
is printed, not counted. Run from the repository root after ./setup.sh:
    python3 scenarios/published/heldout/lmdeploy_a100.py [--set key=value ...]"""
import concurrent.futures as cf
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from heldout_run import ROOT, extra_sets, run_json  # noqa: E402

BASE = os.path.join(ROOT, 'scenarios', 'published', 'serving',
                    'lmdeploy-v0.1.0a1-llama2-70b-fp16-a100-tp4-batch64-isl128-osl2048-throughput.yaml')
# layers, hidden, heads, kv heads, FFN, vocabulary, TP (Meta's and InternLM's published configurations)
MODELS = {
    '7B': (32, 4096, 32, 32, 11008, 32000, 1),
    '13B': (40, 5120, 40, 40, 13824, 32000, 1),
    '20B': (60, 5120, 40, 40, 13824, 103168, 2),
    '70B': (80, 8192, 64, 8, 28672, 32000, 4),
}
LENGTHS = [(1, 128), (128, 128), (128, 2048), (2048, 128), (2048, 2048)]
# batch -> (throughput, p50 s) for each of LENGTHS, in order
TABLE = {
    '7B': {1: [(100.02, .009), (102.21, .01), (98.92, .01), (86.1, .01), (93.78, .011)],
           16: [(1504.72, .01), (1272.47, .011), (1010.62, .015), (348.87, .02), (601.63, .025)],
           32: [(2136.73, .011), (2125.47, .012), (1462.12, .021), (450.43, .031), (733.34, .04)],
           64: [(4154.81, .012), (3024.07, .014), (1852.06, .03), (493.46, .046), (755.65, .047)]},
    '13B': {1: [(57.49, .017), (56.58, .017), (55.29, .018), (48.99, .019), (52.12, .019)],
            16: [(869.45, .018), (757.3, .019), (605.88, .026), (257.92, .033), (366.67, .04)],
            32: [(1667.5, .019), (1301.27, .021), (860.14, .034), (291.54, .046), (389.64, .047)],
            64: [(3049.16, .02), (2033.22, .024), (998.86, .045), (286.32, .047), (387.86, .047)]},
    '20B': {1: [(61.14, .016), (60.03, .016), (58.26, .017), (51.93, .018), (56.36, .018)],
            16: [(903.01, .017), (794.13, .018), (669.87, .024), (288.6, .029), (441.46, .035)],
            32: [(1673.64, .019), (1347.57, .02), (1025.62, .031), (352.45, .042), (514.6, .049)],
            64: [(2954.34, .021), (2122.92, .024), (1276.61, .042), (350.82, .05), (512.37, .05)]},
    '70B': {1: [(33.94, .029), (33.63, .029), (32.38, .031), (28.32, .031), (31.9, .031)],
            16: [(468.52, .03), (439.77, .03), (482.99, .033), (189.34, .035), (399.42, .036)],
            32: [(906.03, .032), (746.36, .032), (853.56, .036), (232.6, .04), (636.23, .043)],
            64: [(1425.79, .037), (1159.84, .037), (1391.8, .043), (270.47, .05), (930.46, .055)]},
}


def run(job):
    name, batch, (prompt, output), (tput, p50) = job
    layers, hidden, heads, kv, ffn, vocab, tp = MODELS[name]
    sets = ['model.layers=%d' % layers, 'model.hidden=%d' % hidden, 'model.heads=%d' % heads,
            'model.kv_heads=%d' % kv, 'model.ffn_hidden=%d' % ffn, 'model.vocab=%d' % vocab,
            'parallel.tp=%d' % tp, 'cluster.gpus_per_node=%d' % tp,
            'inference.requests=%d' % batch, 'inference.arrivals.concurrency=%d' % batch,
            'inference.prompt_tokens.value=%d' % prompt, 'inference.output_tokens.value=%d' % output]
    result, why = run_json(BASE, sets + extra_sets(sys.argv))
    return job, result, why


def main():
    jobs = [(m, b, LENGTHS[i], row) for m in MODELS for b, rows in TABLE[m].items() for i, row in enumerate(rows)]
    with cf.ThreadPoolExecutor(2) as ex:
        results = list(ex.map(run, jobs))
    err = lambda a, b: (a - b) / b * 100
    per_model = {}
    print('%-4s %5s %11s | %10s %10s %7s | %6s %6s %7s' % ('model', 'batch', 'prompt/out', 'tok/s pub', 'model',
                                                             'error', 'p50 ms', 'model', 'error'))
    for (name, batch, (prompt, output), (tput, p50)), result, why in results:
        if result is None:
            print('%-4s %5d %5d/%-5d | no result: %s' % (name, batch, prompt, output, why))
            continue
        et = err(result['throughput_tokens_per_s'], tput)
        ep = err(result['tpot_s_p50'], p50)
        counted = not (prompt == 2048 and batch > 1)
        agg = per_model.setdefault(name, {'tput': [], 'p50': []})
        agg['tput'].append(abs(et))
        if counted:
            agg['p50'].append(abs(ep))
        print('%-4s %5d %5d/%-5d | %10.2f %10.1f %+6.1f%% | %6.0f %6.1f %+6.1f%%%s' % (
            name, batch, prompt, output, tput, result['throughput_tokens_per_s'], et, p50 * 1e3,
            result['tpot_s_p50'] * 1e3, ep, '' if counted else '  (not counted)'))
    for name, agg in per_model.items():
        print('%s: throughput mean |error| %.1f %% over %d rows; per-token p50 %.1f %% over %d rows' % (
            name, sum(agg['tput']) / len(agg['tput']), len(agg['tput']), sum(agg['p50']) / len(agg['p50']),
            len(agg['p50'])))


if __name__ == '__main__':
    main()
