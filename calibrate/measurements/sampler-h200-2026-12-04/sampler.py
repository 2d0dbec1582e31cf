"""vLLM's samplers on the logits, op by op, on one GPU: the passes a greedy step makes over a
[B, V] row of 16-bit logits (vLLM V0's Sampler.forward: the cast to FP32, the temperature
division, softmax and log-softmax in FP32, the argmax; V1's: the cast and the argmax), each
timed as CUDA-graph replays of 20 calls (median of 15 replays) so the host takes no part.
Prints one JSON line per (op, B, V) with the bytes the simulator charges the op."""
import json, statistics, torch

dev = 'cuda'
REPS, RUNS = 20, 15


def timed(fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
        with torch.cuda.graph(g):
            for _ in range(REPS):
                fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    out = []
    for _ in range(RUNS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1e3 / REPS)
    return statistics.median(out)


x = torch.empty(2 << 30, dtype=torch.uint8, device=dev)
y = torch.empty_like(x)
print(json.dumps({'op': 'copy', 'bytes': 2 * x.numel(), 'us': timed(lambda: y.copy_(x))}), flush=True)
del x, y
for V in (32000, 128256):
    for B in (8, 32, 64, 256, 1024, 2048):
        logits = torch.randn(B, V, device=dev, dtype=torch.bfloat16)
        t = torch.ones(B, device=dev)
        f = logits.float()
        lp = torch.log_softmax(f, dim=-1)
        n = B * V
        ops = {
            'to_float': (lambda: logits.to(torch.float), 6 * n),
            'temperature': (lambda: f.div_(t.unsqueeze(1)), 8 * n),
            'softmax': (lambda: torch.softmax(f, dim=-1, dtype=torch.float), 16 * n),
            'log_softmax': (lambda: torch.log_softmax(f, dim=-1, dtype=torch.float), 16 * n),
            'argmax': (lambda: torch.argmax(lp, dim=-1), 4 * n),
        }

        def v0():
            g = logits.to(torch.float)
            g.div_(t.unsqueeze(1))
            p = torch.softmax(g, dim=-1, dtype=torch.float)
            q = torch.log_softmax(g, dim=-1, dtype=torch.float)
            return p, torch.argmax(q, dim=-1)

        ops['v0_sampler'] = (v0, 50 * n)
        ops['v1_sampler'] = (lambda: logits.to(torch.float32).argmax(dim=-1), 10 * n)
        for name, (fn, nbytes) in ops.items():
            print(json.dumps({'op': name, 'B': B, 'V': V, 'bytes': nbytes, 'us': timed(fn)}), flush=True)
        del logits, f, lp
