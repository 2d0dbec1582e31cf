#!/usr/bin/env python3
"""One GPU's training step of a GPT as Megatron-Core r0.8.0 runs it with its Transformer Engine layer spec, in PyTorch.

The Megatron-LM README's H100 weak-scaling rows (Megatron-Core r0.8.0) run `pretrain_gpt.py` with the TE spec
(`get_gpt_layer_with_transformer_engine_spec`), BF16, no recompute, dropout 0.1 (attention and hidden), learned
absolute positions, an untied output layer, the distributed optimizer and the per-micro-batch loss check. What each
part of this script does follows that code:

- `TELayerNormColumnParallelLinear` (QKV, FC1): a LayerNorm kernel, then the GEMM; the QKV bias in the GEMM's
  epilogue, FC1's bias returned (`skip_bias_add`) for the fused bias-GeLU.
- `TEDotProductAttention`: cuDNN's fused attention on Hopper (TE >= 1.8 prefers it there), causal, with dropout 0.1
  drawn inside the kernel; here PyTorch's cuDNN SDPA backend (the same library, today's version).
- `TERowParallelLinear` (projection, FC2): the GEMM, its bias returned for `bias_dropout_add_fused_train`.
- `bias_gelu` / `bias_gelu_back` and `bias_dropout_add_fused_train` under `jit_fuser`, which is `torch.compile` from
  PyTorch 2.2 (`megatron/core/jit.py`).
- The weight gradients accumulated into FP32 `main_grad` buffers (gradient accumulation fusion: TE's wgrad GEMM
  accumulates into FP32); here a GEMM with an FP32 output added into the buffer when PyTorch can
  (`torch.addmm(..., out_dtype=torch.float32)`), else the BF16 wgrad added by a kernel of its own (reported).
- `vocab_parallel_cross_entropy` on `logits.float()`, its in-place passes; `loss_func`'s NaN check (`.item()`) each
  micro-batch.
- The distributed optimizer at DP 1: FP32 main parameters, Adam (fused), the gradient norm and clipping to 1.0, the
  BF16 parameters copied back, the gradient buffers zeroed.

Differences that remain: PyTorch's LayerNorm kernels for TE's; the cuDNN of today for that of 2024; the QKV gradient
assembled by autograd's cat (TE's attention writes it in place); the bias gradients summed by autograd's reductions
(TE fuses the QKV bias gradient into the wgrad GEMM's epilogue); no TE or Megatron Python on the host (the step's
host time is reported apart: the median step with the device's time taken from CUDA events).

Prints the median step time over --iterations steps (CUDA events), the time of each phase, and the profiler's kernel
time by class over one more step.
"""
import argparse
import json
import statistics
import sys
import time

import os

import torch
import torch.nn.functional as F

# Megatron's vocab-parallel cross entropy at one tensor-parallel rank, on logits.float(): the same passes in r0.8.0 as
# in the 2021 code the earlier replica ran.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "megatron2021-step-h200-2026-12-05"))
from step import CrossEntropy  # noqa: E402


def count_nodes(fn):
    """The autograd graph's nodes reachable from `fn` (a tensor's grad_fn): what backward() walks first."""
    seen, todo = set(), [fn]
    while todo:
        f = todo.pop()
        if f is None or f in seen:
            continue
        seen.add(f)
        todo.extend(n for n, _ in f.next_functions)
    return len(seen)


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--micro-batches", type=int, default=4)
    p.add_argument("--vocab", type=int, default=131072)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--iterations", type=int, default=6)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--head-start-us", type=float, default=0,
                   help="a GPU spin of this many microseconds wherever the host has just waited for the GPU (before "
                        "each micro-batch's forward and backward), so the host issues ahead of an occupied GPU")
    p.add_argument("--head-start-at", choices=["all", "backward", "forward"], default="all",
                   help="where the --head-start-us spin goes: before each forward and backward, before each backward "
                        "(after the NaN check's host wait), or before each forward")
    p.add_argument("--no-profile", action="store_true", help="skip the profiled step (timing and host stamps only)")
    p.add_argument("--gaps", action="store_true",
                   help="also report the idle time between kernels of the profiled step, by size and by neighbours")
    p.add_argument("--json", default="")
    return p.parse_args()


# --- jit_fuser = torch.compile (megatron/core/jit.py, PyTorch >= 2.2) -------------------------------------------
def _bias_gelu(bias, y):
    x = bias + y
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


def _bias_gelu_back(g, bias, y):
    x = bias + y
    tanh_out = torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))
    ff = 0.5 * x * ((1 - tanh_out * tanh_out) * (0.79788456 + 0.1070322243 * x * x)) + 0.5 * (1 + tanh_out)
    return ff * g


def _bias_dropout_add(x, bias, residual, prob: float):
    x = x + bias
    out = torch.nn.functional.dropout(x, p=prob, training=True)
    return residual + out


bias_gelu = torch.compile(_bias_gelu)
bias_gelu_back = torch.compile(_bias_gelu_back)
bias_dropout_add = torch.compile(_bias_dropout_add)


class GeLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, bias):
        ctx.save_for_backward(y, bias)
        return bias_gelu(bias, y)

    @staticmethod
    def backward(ctx, g):
        y, bias = ctx.saved_tensors
        t = bias_gelu_back(g, bias, y)
        return t, t


FP32_WGRAD = None  # set in main(): whether addmm takes out_dtype here


class Linear(torch.autograd.Function):
    """y = x W^T (+ b); the weight gradient accumulated into W.main_grad (FP32), as TE's fused accumulation."""

    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        ctx.has_bias = b is not None
        return F.linear(x, w, b)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        g2 = g.reshape(-1, g.shape[-1])
        x2 = x.reshape(-1, x.shape[-1])
        dx = (g2 @ w).view(x.shape)
        if FP32_WGRAD:
            torch.addmm(w.main_grad, g2.t(), x2, out_dtype=torch.float32, out=w.main_grad)
        else:
            w.main_grad.add_(g2.t() @ x2)
        db = g2.sum(0) if ctx.has_bias else None
        return dx, None, db


def linear(x, w, b=None):
    return Linear.apply(x, w, b)


class Layer(torch.nn.Module):
    def __init__(self, h, heads, dropout):
        super().__init__()
        self.h, self.np, self.hn, self.p = h, heads, h // heads, dropout
        s = 0.02
        self.ln1 = torch.nn.LayerNorm(h)
        self.ln2 = torch.nn.LayerNorm(h)
        self.wqkv = torch.nn.Parameter(torch.randn(3 * h, h) * s)
        self.bqkv = torch.nn.Parameter(torch.zeros(3 * h))
        self.wd = torch.nn.Parameter(torch.randn(h, h) * s)
        self.bd = torch.nn.Parameter(torch.zeros(h))
        self.w1 = torch.nn.Parameter(torch.randn(4 * h, h) * s)
        self.b1 = torch.nn.Parameter(torch.zeros(4 * h))
        self.w2 = torch.nn.Parameter(torch.randn(h, 4 * h) * s)
        self.b2 = torch.nn.Parameter(torch.zeros(h))

    def forward(self, x):
        sq, b, _ = x.shape
        mixed = linear(self.ln1(x), self.wqkv, self.bqkv).view(sq, b, self.np, 3 * self.hn)
        q, k, v = torch.split(mixed, self.hn, dim=-1)  # [s, b, np, hn] views, as Megatron-Core's split
        q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))  # [b, np, s, hn] views for SDPA
        ctx = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p, is_causal=True)
        ctx = ctx.permute(2, 0, 1, 3).reshape(sq, b, self.h)
        x = bias_dropout_add(linear(ctx, self.wd), self.bd, x, self.p)
        act = GeLUFunction.apply(linear(self.ln2(x), self.w1), self.b1)
        return bias_dropout_add(linear(act, self.w2), self.b2, x, self.p)


class Gpt(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.a = a
        self.wte = torch.nn.Parameter(torch.randn(a.vocab, a.hidden) * 0.02)
        self.wpe = torch.nn.Parameter(torch.randn(a.seq, a.hidden) * 0.02)
        self.layers = torch.nn.ModuleList(Layer(a.hidden, a.heads, a.dropout) for _ in range(a.layers))
        self.lnf = torch.nn.LayerNorm(a.hidden)
        self.wout = torch.nn.Parameter(torch.randn(a.vocab, a.hidden) * 0.02)  # untied output layer

    def forward(self, tokens, labels):
        e = F.embedding(tokens, self.wte) + self.wpe.unsqueeze(0)  # LanguageModelEmbedding
        x = F.dropout(e.transpose(0, 1).contiguous(), p=self.a.dropout, training=True)
        for layer in self.layers:
            x = layer(x)
        logits = linear(self.lnf(x), self.wout)  # [s, b, V]
        return CrossEntropy.apply(logits.float(), labels.transpose(0, 1).contiguous())


class DistributedOptimizer:
    """Megatron-Core's DistributedOptimizer at DP 1: FP32 main grads (the DDP buffer) and main params, Adam."""

    def __init__(self, model):
        self.params = [p for p in model.parameters()]
        for p in self.params:
            p.main_grad = torch.zeros(p.shape, dtype=torch.float32, device=p.device)
        self.main = [p.detach().float().clone().requires_grad_(True) for p in self.params]
        self.opt = torch.optim.Adam(self.main, lr=1e-4, fused=True)

    def collect(self):
        # Parameters whose gradient autograd produced (LayerNorm, biases, embeddings) go into main_grad, as
        # Megatron-Core's DDP hooks do after each backward.
        for p in self.params:
            if p.grad is not None:
                p.main_grad.add_(p.grad)
                p.grad = None

    def step(self):
        grads = [p.main_grad for p in self.params]
        norms = torch._foreach_norm(grads)
        total = torch.norm(torch.stack(norms))
        coef = (1.0 / (total + 1e-6)).clamp(max=1.0)
        torch._foreach_mul_(grads, coef)
        for m, g in zip(self.main, grads):
            m.grad = g
        self.opt.step()
        with torch.no_grad():
            torch._foreach_copy_(self.params, self.main)
        for g in grads:
            g.zero_()


def main():
    global FP32_WGRAD
    a = parse()
    torch.manual_seed(1234)
    torch.backends.cuda.enable_cudnn_sdp(True)
    try:
        c = torch.zeros(8, 8, device="cuda")
        torch.addmm(c, torch.ones(8, 8, device="cuda", dtype=torch.bfloat16),
                    torch.ones(8, 8, device="cuda", dtype=torch.bfloat16), out_dtype=torch.float32, out=c)
        FP32_WGRAD = float(c[0, 0]) == 8.0
    except Exception as e:  # noqa: BLE001
        print("addmm out_dtype unavailable:", e)
        FP32_WGRAD = False
    model = Gpt(a).cuda().bfloat16()
    opt = DistributedOptimizer(model)
    nparams = sum(p.numel() for p in model.parameters())
    from torch.nn.attention import SDPBackend, sdpa_kernel

    BACKEND = SDPBackend.CUDNN_ATTENTION
    try:  # cuDNN's fused attention with dropout, causal, on [b, np, s, hn] views of the split QKV
        qkv = torch.randn(a.seq, 1, a.heads, 3 * (a.hidden // a.heads), device="cuda", dtype=torch.bfloat16,
                          requires_grad=True)
        q, k, v = (t.permute(1, 2, 0, 3) for t in torch.split(qkv, a.hidden // a.heads, dim=-1))
        with sdpa_kernel([BACKEND]):
            F.scaled_dot_product_attention(q, k, v, dropout_p=a.dropout, is_causal=True).sum().backward()
    except Exception as e:  # noqa: BLE001
        print("cuDNN attention unavailable here, FlashAttention instead:", str(e)[:300])
        BACKEND = SDPBackend.FLASH_ATTENTION

    def batch():
        t = torch.randint(0, a.vocab, (a.micro_batch, a.seq), device="cuda")
        return t, torch.roll(t, -1, 1)

    ev = {k: torch.cuda.Event(enable_timing=True) for k in ["start", "mb", "opt"]}

    spin_cycles = 0
    if a.head_start_us > 0:  # torch.cuda._sleep counts SM clock cycles: find how many make a microsecond here
        s0, s1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1000000)
        s0.record()
        torch.cuda._sleep(20000000)
        s1.record()
        torch.cuda.synchronize()
        spin_cycles = int(a.head_start_us * 20000000 / (s0.elapsed_time(s1) * 1e3))

    def spin(place):
        if spin_cycles and a.head_start_at in ("all", place):
            torch.cuda._sleep(spin_cycles)

    # Host time from the NaN check's return to autograd's first node (the engine's start: the graph's dependency
    # count, then the loss's backward node), stamped by a pre-hook on the loss's grad_fn; and the graph's node count.
    issue = {"forward": [], "backward": [], "engine_start": []}
    graph = {"nodes": 0}
    stamp = {}

    def step():
        t0 = time.perf_counter()
        ev["start"].record()
        with sdpa_kernel([BACKEND]):
            for _ in range(a.micro_batches):
                spin("forward")
                h0 = time.perf_counter()
                tokens, labels = batch()
                losses = model(tokens, labels)
                loss = losses.float().mean()
                h1 = time.perf_counter()
                if not graph["nodes"]:
                    graph["nodes"] = count_nodes(loss.grad_fn)
                loss.grad_fn.register_prehook(lambda g: stamp.__setitem__("engine", time.perf_counter()))
                assert not loss.isnan().item()  # loss_func's NaN check: a host wait each micro-batch
                spin("backward")
                h2 = time.perf_counter()
                loss.backward()
                opt.collect()
                h3 = time.perf_counter()
                issue["forward"].append(h1 - h0)
                issue["backward"].append(h3 - h2)
                issue["engine_start"].append(stamp["engine"] - h2)
        ev["mb"].record()
        opt.step()
        ev["opt"].record()
        torch.cuda.synchronize()
        host = time.perf_counter() - t0
        return (ev["start"].elapsed_time(ev["opt"]) / 1e3, ev["start"].elapsed_time(ev["mb"]) / 1e3,
                ev["mb"].elapsed_time(ev["opt"]) / 1e3, host, loss.item())

    for _ in range(a.warmup):
        step()
    for v in issue.values():
        v.clear()
    runs = [step() for _ in range(a.iterations)]
    med = lambda i: statistics.median(r[i] for r in runs)
    out = {"params": nparams, "step_s": med(0), "micro_batches_s": med(1), "optimizer_s": med(2),
           "host_step_s": med(3), "steps_s": [round(r[0], 5) for r in runs], "loss": runs[-1][4],
           "fp32_wgrad_gemm": FP32_WGRAD, "attention_backend": str(BACKEND), "args": vars(a), "gpu": torch.cuda.get_device_name(),
           "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
           "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
           "head_start_us": a.head_start_us, "spin_cycles": spin_cycles,
           "host_issue_forward_s": statistics.median(issue["forward"]),
           "host_issue_backward_s": statistics.median(issue["backward"]),
           "host_engine_start_s": statistics.median(issue["engine_start"]), "autograd_nodes": graph["nodes"]}
    if a.no_profile:
        text = json.dumps(out, indent=1)
        if a.json:
            with open(a.json, "w") as f:
                f.write(text)
        print(text)
        return

    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
    classes = {}
    kernels = {}
    counts = {}
    for e in prof.key_averages():
        t = e.device_time_total / 1e6 if hasattr(e, "device_time_total") else e.cuda_time_total / 1e6
        if t <= 0 or e.key.startswith("ProfilerStep"):
            continue
        n = e.key
        lo = n.lower()
        if any(s in lo for s in ["fmha", "flash", "cudnn_generated", "attention", "sdpa"]) and "gemm" not in lo:
            c = "attention"
        elif any(s in lo for s in ["gemm", "cutlass", "xmma", "cublas", "sm90_", "sm80_", "nvjet"]):
            c = "gemm"
        elif "layer_norm" in lo or "layernorm" in lo:
            c = "layernorm"
        elif "triton" in lo:
            c = "compiled (bias-gelu, bias-dropout-add)"
        elif "adam" in lo or "multi_tensor" in lo or "foreach" in lo:
            c = "optimizer / foreach"
        elif "reduce" in lo:
            c = "reductions"
        elif "copy" in lo or "cat" in lo:
            c = "copies"
        else:
            c = "elementwise"
        classes[c] = classes.get(c, 0.0) + t
        kernels[n] = kernels.get(n, 0.0) + t
        counts[n] = counts.get(n, 0) + e.count
    out["profiled_kernel_s"] = sum(classes.values())
    out["classes_s"] = dict(sorted(classes.items(), key=lambda kv: -kv[1]))
    top = sorted(kernels.items(), key=lambda kv: -kv[1])[:60]
    out["top_kernels_s"] = {k: v for k, v in top}
    out["top_kernels_count"] = {k: counts[k] for k, _ in top}
    if a.gaps:
        out["gaps"] = gap_report(prof)
    text = json.dumps(out, indent=1)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text)
    print(json.dumps({k: v for k, v in out.items() if k not in ("top_kernels_s", "top_kernels_count", "args")},
                     indent=1))
    for k, v in list(out["top_kernels_s"].items())[:40]:
        print(f"{v * 1e3:9.2f} ms {counts[k]:6d}  {k[:110]}")


def kernel_class(name):
    lo = name.lower()
    if any(s in lo for s in ["fmha", "flash", "cudnn_generated", "sdpa"]) and "gemm" not in lo:
        return "attention"
    if "cudnn" in lo:
        return "cudnn-aux"
    if any(s in lo for s in ["gemm", "cutlass", "xmma", "cublas", "sm90_", "sm80_", "nvjet"]):
        return "gemm"
    if "memset" in lo:
        return "memset"
    if "memcpy" in lo:
        return "memcpy"
    if "layer_norm" in lo or "layernorm" in lo or "gammabeta" in lo:
        return "layernorm"
    if "triton" in lo:
        return "triton"
    if "multi_tensor" in lo or "foreach" in lo:
        return "multi-tensor"
    if "fill" in lo:
        return "fill"
    if "cuda_functor_add<float>" in lo or "cudafunctor_add<float>" in lo:
        return "add-fp32"
    if "reduce" in lo:
        return "reduce"
    return "elementwise"


def gap_report(prof):
    """Idle time on the GPU between consecutive device activities of the profiled step: the sum, a histogram by
    size, and the largest sums by (previous class -> next class)."""
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    prof.export_chrome_trace(path)
    with open(path) as f:
        trace = json.load(f)
    os.unlink(path)
    ev = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and e.get("cat") in
          ("kernel", "gpu_memset", "gpu_memcpy")]
    ev.sort(key=lambda e: e["ts"])
    busy = sum(e["dur"] for e in ev)
    span = ev[-1]["ts"] + ev[-1]["dur"] - ev[0]["ts"]
    edges = [2, 5, 10, 20, 50, 100, 1000, 1e12]
    hist = {f"<{b:g}us": [0, 0.0] for b in edges}
    pairs = {}
    end = ev[0]["ts"] + ev[0]["dur"]
    prev = ev[0]
    for e in ev[1:]:
        g = e["ts"] - end
        if g > 0:
            for b in edges:
                if g < b:
                    h = hist[f"<{b:g}us"]
                    h[0] += 1
                    h[1] += g
                    break
            k = kernel_class(prev["name"]) + " -> " + kernel_class(e["name"])
            p = pairs.setdefault(k, [0, 0.0, 0.0])
            p[0] += 1
            p[1] += g
            p[2] = max(p[2], g)
        if e["ts"] + e["dur"] > end:
            end = e["ts"] + e["dur"]
            prev = e
    top = sorted(pairs.items(), key=lambda kv: -kv[1][1])[:40]
    return {"activities": len(ev), "busy_us": busy, "span_us": span, "idle_us": span - busy,
            "histogram": {k: {"count": v[0], "us": round(v[1], 1)} for k, v in hist.items()},
            "by_neighbours": {k: {"count": v[0], "us": round(v[1], 1), "max_us": round(v[2], 1)} for k, v in top}}


if __name__ == "__main__":
    sys.exit(main())
