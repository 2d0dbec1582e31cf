"""A GPT layer's forward and backward in eager PyTorch (BF16), timed per iteration, with its
CUDA kernels counted by the profiler; run once with CUDA_LAUNCH_BLOCKING=0 and once with 1
(run.sh): the difference per kernel is what a blocking launch costs the GPU (the host's
dispatch of each op, no longer hidden behind the kernels queued ahead of it).
Shapes: BLOOM-176B's layer at TP 4 (hidden 14,336, 28 heads a GPU, 2 x 2,048 tokens) and a
small layer (hidden 2,048, 16 heads, 2 x 2,048 tokens), two layers each, unfused attention
(baddbmm, softmax, dropout, bmm) as Megatron-DeepSpeed of 2022 ran it.
"""
import json, os, statistics, sys, torch
import torch.nn.functional as F

out, tag = sys.argv[1], sys.argv[2]
dev = torch.device("cuda")
torch.manual_seed(0)

class Layer(torch.nn.Module):
    def __init__(s, h, heads, tp):
        super().__init__()
        s.h, s.nh, s.d = h, heads // tp, h // heads
        s.ln1 = torch.nn.LayerNorm(h)
        s.qkv = torch.nn.Linear(h, 3 * h // tp)
        s.proj = torch.nn.Linear(h // tp, h)
        s.ln2 = torch.nn.LayerNorm(h)
        s.fc1 = torch.nn.Linear(h, 4 * h // tp)
        s.fc2 = torch.nn.Linear(4 * h // tp, h)

    def forward(s, x):  # x: [seq, batch, h]
        S, B, _ = x.shape
        y = s.ln1(x)
        q, k, v = s.qkv(y).view(S, B, s.nh, 3 * s.d).chunk(3, dim=-1)
        q = q.reshape(S, B * s.nh, s.d).transpose(0, 1)
        k = k.reshape(S, B * s.nh, s.d).transpose(0, 1)
        v = v.reshape(S, B * s.nh, s.d).transpose(0, 1)
        scores = torch.baddbmm(torch.zeros(B * s.nh, S, S, device=x.device, dtype=x.dtype), q, k.transpose(1, 2),
                               beta=0.0, alpha=s.d ** -0.5)
        mask = torch.ones(S, S, device=x.device, dtype=torch.bool).triu(1)
        p = F.dropout(torch.softmax(scores.masked_fill(mask, -1e4), dim=-1), 0.1)
        c = torch.bmm(p, v).transpose(0, 1).reshape(S, B, s.nh * s.d)
        x = x + F.dropout(s.proj(c), 0.1)
        x = x + F.dropout(s.fc2(F.gelu(s.fc1(s.ln2(x)))), 0.1)
        return x

rows = []
for name, h, heads, tp in [("bloom-tp4", 14336, 112, 4), ("small", 2048, 16, 1)]:
    model = torch.nn.Sequential(Layer(h, heads, tp), Layer(h, heads, tp)).to(dev, torch.bfloat16)
    x = torch.randn(2048, 2, h, device=dev, dtype=torch.bfloat16, requires_grad=True)

    def step():
        model(x).float().pow(2).mean().backward()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    kernels = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    ts = []
    for _ in range(15):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        s.record(); step(); e.record(); e.synchronize()
        ts.append(s.elapsed_time(e) / 1e3)
    r = {"case": name, "blocking": tag, "step_s": statistics.median(ts), "kernels": kernels}
    rows.append(r)
    print(json.dumps(r), flush=True)
    del model, x
    torch.cuda.empty_cache()
json.dump(rows, open(f"{out}/layer-{tag}.json", "w"), indent=1)
