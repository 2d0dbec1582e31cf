"""Each measured op beside the simulator's uncalibrated price on an H200 (cost_models/compute.cc):
a memory-bound kernel costs 4.4 us + bytes / (4.8 TB/s x 0.88); the FP32 cast of 16-bit logits is a
dynamic-cast loop, 94 issue slots an element more at 132 SMs x 1.98 GHz x 256 (docs/model.md,
"PyTorch eager"). Prints measured / model per op and batch, both runs' median."""
import json, statistics
LAT, BW, SLOTS = 4.4e-6, 4.8e12 * 0.88, 132 * 1.98e9 * 256
rows = {}
for n in (1, 2):
    for line in open('sampler-%d.jsonl' % n):
        r = json.loads(line)
        if 'B' in r:
            rows.setdefault((r['op'], r['B'], r['V']), []).append(r['us'])
MODEL_BYTES = {'to_float': 6, 'temperature': 8, 'softmax': 16, 'log_softmax': 16, 'argmax': 4}
def model_us(op, B, V):
    n = B * V
    def one(o):
        t = LAT + MODEL_BYTES[o] * n / BW
        return t + (94 * n / SLOTS if o == 'to_float' else 0)
    if op == 'v0_sampler':
        return 1e6 * sum(one(o) for o in MODEL_BYTES)
    if op == 'v1_sampler':
        return 1e6 * (one('to_float') + one('argmax'))
    return 1e6 * one(op)
ops = ['to_float', 'temperature', 'softmax', 'log_softmax', 'argmax', 'v0_sampler', 'v1_sampler']
for V in (32000, 128256):
    print('V = %d' % V)
    print('%-12s' % 'B' + ''.join('%14s' % o for o in ops))
    for B in (8, 32, 64, 256, 1024, 2048):
        cells = []
        for o in ops:
            us = statistics.median(rows[(o, B, V)])
            cells.append('%7.1f %5.2f' % (us, us / model_us(o, B, V)))
        print('%-12d' % B + ''.join('%14s' % c for c in cells))
