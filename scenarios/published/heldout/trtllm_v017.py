#!/usr/bin/env python3
"""TensorRT-LLM's v0.17 throughput table (perf-overview.md, commit 258c754): every Llama 3.1 and
Mistral 7B row on H100, H200 and A100 through clustersim, from the case file of the row's GPU with
the row's model, TP and lengths set (Mistral 7B: Llama 3.1 8B's layers, a 32,000-token vocabulary). The rows and their published figures are read from docs/accuracy.md ("Held
out: TensorRT-LLM's v0.17 throughput table"). Run from the repository root after ./setup.sh:
    python3 scenarios/published/heldout/trtllm_v017.py [--set key=value ...]
Prints each row's error and the mean absolute error (all rows, roomy, memory-bound)."""
import json, os, re, subprocess, sys, concurrent.futures as cf
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
doc = open(os.path.join(ROOT, 'docs', 'accuracy.md')).read()
sec = doc.split("### Held out: TensorRT-LLM's v0.17 throughput table")[1].split("### Held out: TensorRT-LLM's v0.17 Mixtral")[0]
rows = []
for line in sec.splitlines():
    m = re.match(r'\| (8B|70B|405B|Mistral 7B) \| (\d) \| (H200|H100|A100) \| ([\d,]+) / ([\d,]+) \| ([\d,.]+) \|', line)
    if m:
        rows.append((m[1], int(m[2]), m[3], int(m[4].replace(',', '')), int(m[5].replace(',', '')), float(m[6].replace(',', ''))))
N = {(128,128):30000,(128,2048):3000,(128,4096):1500,(2048,128):3000,(2048,2048):1500,(5000,500):1500,(1000,1000):3000,(500,2000):3000,(20000,2000):1000}
base = {'H200':'trtllm-v0.17-llama3.1-8b-fp8-h200-tp1-isl1000-osl1000.yaml','H100':'trtllm-v0.17-llama3.1-8b-fp8-h100-tp1-isl128-osl128.yaml','A100':'trtllm-v0.17-llama3.1-8b-fp16-a100-tp1-isl128-osl128.yaml'}
args = sys.argv[1:]
extra = [args[i + 1] for i in range(len(args) - 1) if args[i] == '--set']
def run(r):
    model, tp, gpu, isl, osl, pub = r
    cmd = [os.path.join(ROOT, 'build', 'clustersim'), 'run',
           os.path.join(ROOT, 'scenarios', 'published', 'serving', base[gpu]), '--json']
    sets = [f'parallel.tp={tp}', f'cluster.gpus_per_node={tp}', f'model.seq_len={max(8192,isl+osl)}',
            f'inference.prompt_tokens.value={isl}', f'inference.output_tokens.value={osl}', f'inference.requests={N[(isl,osl)]}']
    if model == 'Mistral 7B': sets.insert(0, 'model.vocab=32000')   # Llama 3.1 8B's shape with Mistral's vocabulary
    elif model != '8B': sets.insert(0, 'model.preset=llama3-' + model.lower())
    for s in sets + extra: cmd += ['--set', s]
    p = subprocess.run(cmd, capture_output=True, text=True)
    try:
        v = json.loads(p.stdout)['throughput_tokens_per_s']
        return r + ((v - pub) / pub * 100,)
    except Exception:
        return r + (float('nan'),)
with cf.ThreadPoolExecutor(2) as ex:
    res = list(ex.map(run, rows))
import math
ok = [x for x in res if not math.isnan(x[6])]
for x in res: print('%s tp%d %s %d/%d %.2f %+.1f' % (x[0], x[1], x[2], x[3], x[4], x[5], x[6]))
mem = [x for x in ok if (x[0]=='70B' and x[1]==1 and x[2]=='H100') or (x[0]=='70B' and x[1]==2 and x[2]=='A100')]
roomy = [x for x in ok if x not in mem]
f = lambda L: sum(abs(x[6]) for x in L)/max(1,len(L))
print('rows %d  mean|err| %.2f  roomy %d %.2f  memory-bound %d %.2f (signed %.2f)' % (len(ok), f(ok), len(roomy), f(roomy), len(mem), f(mem), sum(x[6] for x in mem)/max(1,len(mem))))
for name in ('8B', '70B', '405B', 'Mistral 7B'):
    L = [x for x in ok if x[0] == name]
    if L: print('%s: rows %d  mean|err| %.2f' % (name, len(L), f(L)))
