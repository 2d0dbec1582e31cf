#!/usr/bin/env python3
"""One GPU's training step of a GPT as Megatron-LM of 2021 ran it (examples/sc21, Narayanan et al. 2021), in PyTorch.

What each part does follows Megatron-LM at commit 6985e58 (2021-08-19): FP16 parameters (Float16Module), the
layer in [s, b, h] order, QKV with its bias, the raw scores by baddbmm (alpha 1 / (sqrt(hn) * layer)), the
upper-triangular fused scale-mask-softmax kernel with the scale = layer number, torch dropout on the
probabilities, bmm with V, the context permuted back with a copy, projection and FC2 without their bias (added in
the jit-fused bias-dropout-add), FC1 without its bias (added in the jit-fused bias-GeLU, tanh form), LayerNorm,
the logits through the tied embedding, the cross entropy over FP32 logits with Megatron's in-place passes, the
loss scaled by a static 8,192, full activation recompute a layer at a time, and the FP16 optimizer: gradients
copied to FP32 main gradients, unscaled and checked for inf, the norm clipped to 1.0, Adam on FP32 main
parameters, and the FP16 parameters copied back.

Stand-ins: PyTorch's LayerNorm for Megatron's fused mixed-precision LayerNorm (its 2021 source needs THC, which
PyTorch no longer has), torch.optim.Adam(fused=True) for apex's FusedAdam, torch._foreach_norm for amp_C's
multi_tensor_l2norm. The softmax is Megatron's own kernel when --fused-softmax names the folder holding
scaled_upper_triang_masked_softmax{.cpp,_cuda.cu,.h} and type_shim.h (megatron/fused_kernels of that commit,
compiled here for sm_90); without it, PyTorch's masked softmax in FP32 (Megatron's fallback path).

Prints the median step time over --iterations steps (CUDA events), the time of each phase, and the profiler's
kernel time by class over one more step.
"""
import argparse
import json
import math
import os
import statistics
import sys

import torch
import torch.nn.functional as F
import torch.utils.checkpoint


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--hidden", type=int, default=2304)
    p.add_argument("--heads", type=int, default=24)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--micro-batch", type=int, default=16)
    p.add_argument("--vocab", type=int, default=51200)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--recompute", choices=["full", "none"], default="full")
    p.add_argument("--iterations", type=int, default=6)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--fused-softmax", default="")
    p.add_argument("--json", default="")
    p.add_argument("--jit", choices=["megatron-2021", "default"], default="megatron-2021",
                   help="megatron-2021: the commit's initialize.py settings (profiling executor off, fusion on GPU: "
                        "TorchScript's legacy fuser); default: this PyTorch's own (NNC)")
    return p.parse_args()


def set_jit(mode):
    if mode == "megatron-2021":
        torch._C._jit_set_profiling_mode(False)
        torch._C._jit_set_profiling_executor(False)
        torch._C._jit_override_can_fuse_on_cpu(True)
        torch._C._jit_override_can_fuse_on_gpu(True)


def load_softmax(folder):
    if not folder:
        return None
    from torch.utils.cpp_extension import load
    os.environ["TORCH_CUDA_ARCH_LIST"] = ""
    build = os.path.join(os.environ.get("TMPDIR", "/tmp"), "mk_build")
    os.makedirs(build, exist_ok=True)
    return load(name="scaled_upper_triang_masked_softmax_cuda",
                sources=[os.path.join(folder, "scaled_upper_triang_masked_softmax.cpp"),
                         os.path.join(folder, "scaled_upper_triang_masked_softmax_cuda.cu")],
                build_directory=build, extra_cflags=["-O3"],
                extra_cuda_cflags=["-O3", "-gencode", "arch=compute_90,code=sm_90", "--use_fast_math",
                                   "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
                                   "--expt-relaxed-constexpr", "--expt-extended-lambda"],
                verbose=False)


class UpperTriangSoftmax(torch.autograd.Function):
    ext = None

    @staticmethod
    def forward(ctx, x, scale):
        probs = UpperTriangSoftmax.ext.forward(x, scale)
        ctx.scale = scale
        ctx.save_for_backward(probs)
        return probs

    @staticmethod
    def backward(ctx, g):
        (probs,) = ctx.saved_tensors
        return UpperTriangSoftmax.ext.backward(g, probs, ctx.scale), None


def softmax(scores, scale, causal_mask):
    # scores [b*np, sq, sk] in fp16
    if UpperTriangSoftmax.ext is not None:
        return UpperTriangSoftmax.apply(scores, scale)
    x = scores.float() * scale
    x = x.masked_fill(causal_mask, -10000.0)
    return torch.softmax(x, dim=-1).half()


@torch.jit.script
def bias_dropout_add(x: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor, prob: float) -> torch.Tensor:
    out = torch.nn.functional.dropout(x + bias, p=prob, training=True)
    return residual + out


@torch.jit.script
def bias_gelu(bias: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x = bias + y
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


@torch.jit.script
def bias_gelu_back(g: torch.Tensor, bias: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x = bias + y
    t = torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x))
    ff = 0.5 * x * ((1 - t * t) * (0.79788456 + 0.1070322243 * x * x)) + 0.5 * (1 + t)
    return ff * g


class BiasGelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, bias):
        ctx.save_for_backward(y, bias)
        return bias_gelu(bias, y)

    @staticmethod
    def backward(ctx, g):
        y, bias = ctx.saved_tensors
        t = bias_gelu_back(g, bias, y)
        return t, t


class Layer(torch.nn.Module):
    def __init__(self, h, heads, number, dropout):
        super().__init__()
        self.h, self.np, self.hn = h, heads, h // heads
        self.number, self.p = number, dropout
        self.norm_factor = math.sqrt(self.hn) * number
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

    def forward(self, x, causal_mask):
        sq, b, _ = x.shape
        ln = self.ln1(x)
        mixed = F.linear(ln, self.wqkv, self.bqkv).view(sq, b, self.np, 3 * self.hn)
        q, k, v = torch.split(mixed, self.hn, dim=-1)
        q = q.view(sq, b * self.np, -1)
        k = k.view(sq, b * self.np, -1)
        scores = torch.empty(b * self.np, sq, sq, dtype=x.dtype, device=x.device)
        scores = torch.baddbmm(scores, q.transpose(0, 1), k.transpose(0, 1).transpose(1, 2),
                               beta=0.0, alpha=1.0 / self.norm_factor)
        probs = softmax(scores, float(self.number), causal_mask)
        probs = F.dropout(probs, p=self.p, training=True)
        v = v.view(sq, b * self.np, -1)
        ctx = torch.bmm(probs, v.transpose(0, 1))
        ctx = ctx.view(b, self.np, sq, self.hn).permute(2, 0, 1, 3).contiguous().view(sq, b, self.h)
        out = F.linear(ctx, self.wd)
        x = bias_dropout_add(out, self.bd.expand_as(x), x, self.p)
        ln = self.ln2(x)
        act = BiasGelu.apply(F.linear(ln, self.w1), self.b1)
        out = F.linear(act, self.w2)
        return bias_dropout_add(out, self.b2.expand_as(x), x, self.p)


class CrossEntropy(torch.autograd.Function):
    # Megatron-LM's _VocabParallelCrossEntropy at one tensor-parallel rank: in-place passes over the FP32 logits.
    @staticmethod
    def forward(ctx, logits, target):
        m = torch.max(logits, dim=-1)[0]
        logits.sub_(m.unsqueeze(dim=-1))
        v = logits.size(-1)
        l2d = logits.view(-1, v)
        t1d = target.reshape(-1)
        ar = torch.arange(0, l2d.size(0), device=logits.device)
        predicted = l2d[ar, t1d].clone().contiguous().view_as(target)
        torch.exp(logits, out=logits)
        s = logits.sum(dim=-1)
        loss = torch.log(s) - predicted
        logits.div_(s.unsqueeze(dim=-1))
        ctx.save_for_backward(logits, t1d)
        return loss

    @staticmethod
    def backward(ctx, g):
        soft, t1d = ctx.saved_tensors
        g2d = soft.view(-1, soft.size(-1))
        ar = torch.arange(0, g2d.size(0), device=soft.device)
        g2d[ar, t1d] -= 1.0
        soft.mul_(g.unsqueeze(dim=-1))
        return soft, None


class Gpt(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.a = a
        self.wte = torch.nn.Parameter(torch.randn(a.vocab, a.hidden) * 0.02)
        self.wpe = torch.nn.Parameter(torch.randn(a.seq, a.hidden) * 0.02)
        self.layers = torch.nn.ModuleList(Layer(a.hidden, a.heads, i + 1, a.dropout) for i in range(a.layers))
        self.lnf = torch.nn.LayerNorm(a.hidden)

    def forward(self, tokens, labels, causal_mask):
        e = F.embedding(tokens, self.wte) + self.wpe.unsqueeze(0)
        e = F.dropout(e, p=self.a.dropout, training=True)
        x = e.transpose(0, 1).contiguous()
        for layer in self.layers:
            if self.a.recompute == "full":
                x = torch.utils.checkpoint.checkpoint(layer, x, causal_mask, use_reentrant=True,
                                                      preserve_rng_state=True)
            else:
                x = layer(x, causal_mask)
        x = self.lnf(x)
        logits = F.linear(x.transpose(0, 1), self.wte)  # [b, s, V]
        return CrossEntropy.apply(logits.float(), labels)


class Fp16Optimizer:
    # Megatron's Float16OptimizerWithFloat16Params with a constant loss scale, and Adam on the FP32 copies.
    def __init__(self, model, scale):
        self.params = [p for p in model.parameters()]
        self.main = [p.detach().float().clone().requires_grad_(True) for p in self.params]
        self.opt = torch.optim.Adam(self.main, lr=1e-4, fused=True)
        self.scale = scale
        self.found_inf = torch.zeros(1, device="cuda")
        self.inv_scale = torch.full((1,), 1.0 / scale, device="cuda")

    def step(self):
        for m, p in zip(self.main, self.params):  # _copy_model_grads_to_main_grads
            m.grad = p.grad.float()
        self.found_inf.zero_()
        grads = [m.grad for m in self.main]
        torch._amp_foreach_non_finite_check_and_unscale_(grads, self.found_inf, self.inv_scale)
        self.found_inf.item()  # the all-reduce over the model-parallel group, then the host reads it
        norms = torch._foreach_norm(grads)
        total = torch.norm(torch.stack(norms))
        coef = (1.0 / (total + 1e-6)).clamp(max=1.0)
        torch._foreach_mul_(grads, coef)
        self.opt.step()
        with torch.no_grad():
            torch._foreach_copy_(self.params, self.main)  # _copy_main_params_to_model_params
        for p in self.params:
            p.grad = None


def main():
    a = parse()
    set_jit(a.jit)
    torch.manual_seed(1234)
    if a.fused_softmax:
        UpperTriangSoftmax.ext = load_softmax(a.fused_softmax)
    model = Gpt(a).cuda().half()
    opt = Fp16Optimizer(model, 8192.0)
    causal_mask = torch.triu(torch.ones(a.seq, a.seq, dtype=torch.bool, device="cuda"), 1)
    nparams = sum(p.numel() for p in model.parameters())

    def batch():
        t = torch.randint(0, a.vocab, (a.micro_batch, a.seq), device="cuda")
        return t, torch.roll(t, -1, 1)

    ev = {k: torch.cuda.Event(enable_timing=True) for k in ["start", "fwd", "bwd", "opt"]}

    def step():
        tokens, labels = batch()
        ev["start"].record()
        loss = model(tokens, labels, causal_mask).mean()
        ev["fwd"].record()
        (loss * opt.scale).backward()
        ev["bwd"].record()
        opt.step()
        ev["opt"].record()
        torch.cuda.synchronize()
        return (ev["start"].elapsed_time(ev["opt"]) / 1e3, ev["start"].elapsed_time(ev["fwd"]) / 1e3,
                ev["fwd"].elapsed_time(ev["bwd"]) / 1e3, ev["bwd"].elapsed_time(ev["opt"]) / 1e3, loss.item())

    for _ in range(a.warmup):
        step()
    runs = [step() for _ in range(a.iterations)]
    med = lambda i: statistics.median(r[i] for r in runs)
    out = {"params": nparams, "step_s": med(0), "forward_s": med(1), "backward_s": med(2), "optimizer_s": med(3),
           "steps_s": [round(r[0], 5) for r in runs], "loss": runs[-1][4],
           "fused_softmax": UpperTriangSoftmax.ext is not None, "args": vars(a),
           "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30}

    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
    classes = {}
    kernels = {}
    for e in prof.key_averages():
        t = e.device_time_total / 1e6 if hasattr(e, "device_time_total") else e.cuda_time_total / 1e6
        if t <= 0:
            continue
        n = e.key
        lo = n.lower()
        if "softmax" in lo and "upper" in lo:
            c = "softmax (megatron)"
        elif any(s in lo for s in ["gemm", "cutlass", "xmma", "cublas", "sm90_", "sm80_"]):
            c = "gemm"
        elif "dropout" in lo or "fused_dropout" in lo:
            c = "dropout"
        elif "layer_norm" in lo or "layernorm" in lo:
            c = "layernorm"
        elif "softmax" in lo:
            c = "softmax (torch)"
        elif "adam" in lo or "multi_tensor" in lo or "foreach" in lo or "non_finite" in lo:
            c = "optimizer / foreach"
        elif "reduce" in lo:
            c = "reductions"
        elif "copy" in lo or "cat" in lo:
            c = "copies"
        else:
            c = "elementwise / fused"
        classes[c] = classes.get(c, 0.0) + t
        kernels[n] = kernels.get(n, 0.0) + t
    out["profiled_kernel_s"] = sum(classes.values())
    out["classes_s"] = dict(sorted(classes.items(), key=lambda kv: -kv[1]))
    out["top_kernels_s"] = dict(sorted(kernels.items(), key=lambda kv: -kv[1])[:40])
    text = json.dumps(out, indent=1)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text)
    print(json.dumps({k: v for k, v in out.items() if k not in ("top_kernels_s", "args")}, indent=1))
    for k, v in list(out["top_kernels_s"].items())[:25]:
        print(f"{v * 1e3:9.2f} ms  {k[:110]}")


if __name__ == "__main__":
    sys.exit(main())
