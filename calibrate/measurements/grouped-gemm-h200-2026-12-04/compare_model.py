"""Each row of grouped_gemm.jsonl beside the uncalibrated model's time for it (the port of
cost_models/compute.cc's gemm_default_seconds in ../decode-gemm-h200-2026-12-03/compare_model.py,
h200-sxm preset, default profile), as the serving plan prices a MoE layer's grouped GEMM:
`reached` GEMMs of the mean row count, every reached expert's weights read once."""
import json, math


def model(m, n, k, batch, sms=132, peak=989.5e12, hbm=4800e9, eff=0.8, khalf=128, meff=0.88, lat=4.4e-6):
    tiles = [(128, 256, 1.0), (256, 128, 1.0), (128, 128, 0.92), (64, 128, 0.80), (64, 64, 0.65)]
    p = peak * eff
    by = 2.0 * batch * (m * k + n * k + m * n)
    best = None
    cd = lambda a, b: (a + b - 1) // b
    for tm, tn, te in tiles:
        split = 1
        while split <= 8:
            if split > 1 and k // split < 256:
                break
            kk = cd(k, split)
            t = cd(m, tm) * cd(n, tn) * split * batch
            w = math.ceil(t / sms)
            math_t = w * sms * 2.0 * tm * tn * kk / (p * te * kk / (kk + khalf))
            part = 8.0 * split * m * n * batch if split > 1 else 0
            tt = max(math_t, (by + part) / (hbm * meff))
            best = tt if best is None or tt < best else best
            split *= 2
    return lat + best


rows = [json.loads(l) for l in open('grouped_gemm.jsonl') if '"shape"' in l]
print('%-16s %6s %7s %10s %10s %10s %7s %7s' % ('shape', 'tokens', 'reached', 'grouped', 'loop', 'model',
                                                 'g/model', 'l/model'))
for r in rows:
    m = math.ceil(r['rows'] / r['reached'])
    p = model(m, r['n'], r['k'], r['reached']) * 1e6
    print('%-16s %6d %7d %10.1f %10.1f %10.1f %7.2f %7.2f' % (r['shape'], r['tokens'], r['reached'], r['grouped_us'],
                                                             r['loop_us'], p, r['grouped_us'] / p, r['loop_us'] / p))
