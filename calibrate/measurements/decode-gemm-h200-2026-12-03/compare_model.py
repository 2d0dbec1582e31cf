import json, math
def model(m,n,k, sms=132, peak=989.5e12, hbm=4800e9, eff=0.8, khalf=128, meff=0.88, lat=4.4e-6):
    tiles=[(128,256,1.0),(256,128,1.0),(128,128,0.92),(64,128,0.80),(64,64,0.65)]
    P=peak*eff; by=2.0*(m*k+n*k+m*n); best=None
    cd=lambda a,b:(a+b-1)//b
    for tm,tn,te in tiles:
        split=1
        while split<=8:
            if split>1 and k//split<256: break
            kk=cd(k,split); t=cd(m,tm)*cd(n,tn)*split; w=math.ceil(t/sms)
            math_t=w*sms*2.0*tm*tn*kk/(P*te*kk/(kk+khalf))
            part=8.0*split*m*n if split>1 else 0
            mem=(by+part)/(hbm*meff)
            tt=max(math_t,mem)
            best=tt if best is None or tt<best else best
            split*=2
    return lat+best
rows=[json.loads(l) for l in open('decode_gemm.jsonl') if '"shape"' in l]
print(open('decode_gemm.jsonl').readline().strip())
print([l for l in open('decode_gemm.jsonl') if 'copy' in l])
cur=None
for r in rows:
    if r['shape']!=cur: cur=r['shape']; print('==',cur, r['n'], r['k'])
    p=model(r['m'],r['n'],r['k'])*1e6
    print('  M=%4d meas %8.2f us (%6.0f GB/s)  model %8.2f  ratio %.2f'%(r['m'],r['us'],r['weight_gbps'],p,r['us']/p))
import statistics as st
for lo,hi in [(1,128),(192,512)]:
    rs=[r['us']/(model(r['m'],r['n'],r['k'])*1e6) for r in rows if lo<=r['m']<=hi]
    print(lo,hi,'n',len(rs),'mean ratio %.3f'%st.mean(rs),'median %.3f'%st.median(rs),'min %.2f max %.2f'%(min(rs),max(rs)),'mean abs dev %.1f%%'%(100*st.mean(abs(x-1) for x in rs)))
