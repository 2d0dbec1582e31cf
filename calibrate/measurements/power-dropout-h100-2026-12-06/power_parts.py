"""The README 1.7B step's kinds of kernel, each back to back at its own shape, on one board: what each draws and
where it settles under the cap (docs/model.md, "Clocks under the power cap"), to find which part of the step's
energy the model's windows miss. Each case after a 5 s idle pause: a burst (~20 ms), then 8 s back to back;
run.sh's nvidia-smi samples give the medians over each case's last 6 s (summary.py, power_parts.json).
  attn-fwdbwd-drop-1x16   causal SDPA (cuDNN), 1 x 16 heads x 4096 x 128, forward + backward, dropout 0.1
  attn-fwd-drop-1x16      its forward alone; attn-fwd-1x16 the same without dropout
  gemm-qkv, gemm-fc1      4096 x 6144 x 2048 and 4096 x 8192 x 2048, bf16 out
  gemm-fc2                4096 x 2048 x 8192
  wgrad-fc1-fp32          2048 x 8192 over 4,096 tokens accumulated into an FP32 buffer (addmm, out_dtype fp32)
  xent                    the cross entropy's passes over 4096 x 131072 logits: float(), max, sub, exp, sum, div
  layernorm               LayerNorm over 4096 x 2048 bf16
  adam                    torch.optim.Adam(fused) step over 256 M FP32 parameters
"""
import sys, torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from backtoback import run_cases

out = sys.argv[1]
dev = torch.device("cuda")
torch.manual_seed(0)
bf = torch.bfloat16
q = torch.randn(1, 16, 4096, 128, device=dev, dtype=bf, requires_grad=True)
k = torch.randn_like(q, requires_grad=True)
v = torch.randn_like(q, requires_grad=True)
go = torch.randn_like(q)
x2048 = torch.randn(4096, 2048, device=dev, dtype=bf)
x8192 = torch.randn(4096, 8192, device=dev, dtype=bf)
w_qkv = torch.randn(2048, 6144, device=dev, dtype=bf)
w_fc1 = torch.randn(2048, 8192, device=dev, dtype=bf)
w_fc2 = torch.randn(8192, 2048, device=dev, dtype=bf)
main_grad = torch.zeros(2048, 8192, device=dev, dtype=torch.float32)
logits = torch.randn(4096, 131072, device=dev, dtype=bf)
ln_w = torch.ones(2048, device=dev, dtype=bf)
params = [torch.zeros(1 << 24, device=dev, requires_grad=True) for _ in range(16)]
for p in params:
    p.grad = torch.randn_like(p)
adam = torch.optim.Adam(params, lr=1e-4, fused=True)
attn_flops = 3.5 * 4.0 * 16 * 4096 * 4096 * 128 / 2


def attn():
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        F.scaled_dot_product_attention(q, k, v, dropout_p=0.1, is_causal=True).backward(go)


def wgrad():
    # bf16 inputs, FP32 accumulate into main_grad, as Megatron's wgrad_gemm_accum_fp32 (cublasGemmEx, beta 1)
    torch.addmm(main_grad, x2048.t(), x8192, out_dtype=torch.float32, out=main_grad)


try:
    wgrad()
except (RuntimeError, TypeError) as e:  # a PyTorch without addmm's out_dtype: mm into FP32, then the add
    print(f"addmm out_dtype unavailable ({e}); wgrad-fc1-fp32 times mm(out_dtype) + add_", flush=True)

    def wgrad():
        main_grad.add_(torch.mm(x2048.t(), x8192, out_dtype=torch.float32))


def xent():
    f = logits.float()
    m = f.max(dim=-1)[0]
    f.sub_(m.unsqueeze(-1))
    f.exp_()
    s = f.sum(dim=-1)
    f.div_(s.unsqueeze(-1))


def attn_fwd(p):
    with torch.no_grad(), sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)


cases = [  # name, fn, (unit, amount per call)
    ("attn-fwdbwd-drop-1x16", attn, ("TFLOP/s", attn_flops / 1e12)),
    ("attn-fwd-drop-1x16", lambda: attn_fwd(0.1), ("TFLOP/s", attn_flops / 3.5 / 1e12)),
    ("attn-fwd-1x16", lambda: attn_fwd(0.0), ("TFLOP/s", attn_flops / 3.5 / 1e12)),
    ("gemm-qkv", lambda: torch.mm(x2048, w_qkv), ("TFLOP/s", 2.0 * 4096 * 6144 * 2048 / 1e12)),
    ("gemm-fc1", lambda: torch.mm(x2048, w_fc1), ("TFLOP/s", 2.0 * 4096 * 8192 * 2048 / 1e12)),
    ("gemm-fc2", lambda: torch.mm(x8192, w_fc2), ("TFLOP/s", 2.0 * 4096 * 2048 * 8192 / 1e12)),
    ("wgrad-fc1-fp32", wgrad, ("TFLOP/s", 2.0 * 4096 * 8192 * 2048 / 1e12)),
    ("xent", xent, ("GB/s", 4096 * 131072 * (2 + 4 + 4 + 8 + 8 + 4 + 8) / 1e9)),
    ("layernorm", lambda: F.layer_norm(x2048, (2048,), ln_w), ("GB/s", 2.0 * 2 * 4096 * 2048 / 1e9)),
    ("adam", adam.step, ("GB/s", 16.0 * (1 << 24) * 28 / 1e9)),
]


run_cases(cases, f"{out}/power_parts.json", width=22)
