#!/usr/bin/env python3
"""TensorRT-LLM's v0.14 online serving table (perf-overview.md, commit 258c754; Triton's TensorRT-LLM
backend, BF16, 500 requests): every row through clustersim, from the case file of the row's model
(H200 rows with cluster.preset=dgx-h200) with the row's lengths and load set. Published figures:
mean TTFT (ms), mean ITL (ms), output throughput (tokens/s), transcribed from the table. Run from
the repository root after ./setup.sh:
    python3 scenarios/published/heldout/trtllm_v014.py [--set key=value ...]"""
import json, os, subprocess, sys, concurrent.futures as cf
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
T = {
 ('70B','H100'): {(467,256): [(2,62,21,498),(4,68,24,973),(8,92,32,1860),(16,175,66,3164),(32,1229,86,4083),('INF',9123,85,4103)],
                  (467,16): [(2,53,18,28),(4,58,20,63),(8,71,24,126),(16,109,38,248),(32,1197,482,452),('INF',9126,548,454)],
                  (202,214): [(2,48,20,401),(4,51,22,771),(8,57,25,1390),(16,74,32,2245),(32,116,42,3003),('INF',4482,50,3459)]},
 ('8B','H100'): {(467,256): [(2,23,8,504),(4,24,9,929),(8,26,9,1959),(16,30,11,3765),(32,50,19,6774),('INF',3335,39,9420)],
                 (467,16): [(2,19,7,32),(4,20,7,63),(8,22,7,126),(16,24,8,251),(32,29,10,493),('INF',3280,193,1269)],
                 (202,214): [(2,19,7,416),(4,20,8,816),(8,21,9,1568),(16,23,10,2879),(32,27,11,4825),('INF',1657,21,8291)]},
 ('70B','H200'): {(467,256): [(2,58,18,499),(4,63,20,980),(8,84,27,1886),(16,165,60,3264),(32,1279,83,4176),('INF',9222,83,4185)],
                  (467,16): [(2,50,15,32),(4,55,16,63),(8,67,20,126),(16,103,33,248),(32,1259,485,450),('INF',9074,546,457)],
                  (202,214): [(2,43,17,408),(4,46,18,784),(8,51,21,1438),(16,67,28,2386),(32,112,39,3235),('INF',4480,48,3719)]},
 ('8B','H200'): {(467,256): [(2,21,6,504),(4,23,7,1001),(8,24,7,1971),(16,27,9,3809),(32,44,16,7025),('INF',3237,36,10121)],
                 (467,16): [(2,18,5,32),(4,19,6,63),(8,20,6,126),(16,22,7,250),(32,27,9,494),('INF',3227,190,1291)],
                 (202,214): [(2,17,6,418),(4,18,6,822),(8,19,7,1589),(16,20,8,2969),(32,24,9,5109),('INF',1665,19,9189)]},
}
D = os.path.join(ROOT, 'scenarios', 'published', 'serving') + os.sep
base={'70B':D+'trtllm-v0.14-triton-llama3.1-70b-bf16-h100-tp4-isl467-osl256-qps2-itl.yaml',
      '8B':D+'trtllm-v0.14-triton-llama3.1-8b-bf16-h100-tp1-isl467-osl256-qps2-itl.yaml'}
args = sys.argv[1:]
extra = [args[i + 1] for i in range(len(args) - 1) if args[i] == '--set']
jobs=[]
for (m,g),lens in T.items():
    for (i,o),rows in lens.items():
        for (q,ttft,itl,tput) in rows: jobs.append((m,g,i,o,q,ttft,itl,tput))
def run(j):
    m,g,i,o,q,ttft,itl,tput=j
    cmd=[os.path.join(ROOT, 'build', 'clustersim'),'run',base[m],'--json']
    sets=['inference.prompt_tokens.value=%d'%i,'inference.output_tokens.value=%d'%o,'model.seq_len=%d'%(i+o)]
    if g=='H200': sets.append('cluster.preset=dgx-h200')
    sets += ['inference.arrivals.process=fixed','inference.arrivals.rate_per_s=1e6'] if q=='INF' else ['inference.arrivals.rate_per_s=%d'%q]
    for s in sets+extra: cmd+=['--set',s]
    p=subprocess.run(cmd,capture_output=True,text=True)
    try: d=json.loads(p.stdout)
    except Exception: return j+(None,p.stderr[:200])
    return j+((d['ttft_s_p50']*1000,d['tpot_s_p50']*1000,d['throughput_tokens_per_s']),'')
with cf.ThreadPoolExecutor(2) as ex: res=list(ex.map(run,jobs))
e=lambda a,b:(a-b)/b*100
agg={'ttft':[], 'itl':[], 'tput':[]}
for r in res:
    m,g,i,o,q,ttft,itl,tput,v,err=r
    if v is None: print(m,g,i,o,q,'ERROR',err); continue
    et,ei,ep=e(v[0],ttft),e(v[1],itl),e(v[2],tput)
    print('%s %s %d/%d qps %s | ttft %d %.0f %+.0f%% | itl %d %.1f %+.0f%% | tput %d %.0f %+.1f%%'%(m,g,i,o,q,ttft,v[0],et,itl,v[1],ei,tput,v[2],ep))
    agg['ttft'].append(abs(et)); agg['itl'].append(abs(ei)); agg['tput'].append(abs(ep))
for k,v in agg.items(): print(k,'rows',len(v),'mean|err| %.1f'%(sum(v)/len(v)))
