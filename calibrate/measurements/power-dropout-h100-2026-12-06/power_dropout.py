"""What attention with dropout and the dropout kernel draw under the 700 W cap, beside the same
kernels without dropout and a BF16 GEMM, on one board (docs/model.md, "Clocks under the power cap").
Each case runs after a 5 s idle pause: a burst (~20 ms, full clocks), then back to back for 8 s;
nvidia-smi (run.sh) samples SM clock and board power every 100 ms, and summary.py reads each case's
last 6 s from the windows written here.
  attn-fwd, attn-fwd-drop         causal SDPA (cuDNN), bf16, 8 x 32 heads x 4096 x 128, forward; dropout 0 / 0.1
  attn-fwdbwd, attn-fwdbwd-drop   the same, forward + backward
  dropout                          F.dropout(p=0.1) over 512 Mi bf16 elements (native_dropout: output and 1-byte mask)
  stream-copy                      bf16 copy of 1 GiB
  gemm                             bf16 8192^3
"""
import sys, torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from backtoback import run_cases

out = sys.argv[1]
dev = torch.device("cuda")
torch.manual_seed(0)
n = 8192
a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
xb = torch.randn(512 << 20, device=dev, dtype=torch.bfloat16)
yb = torch.empty_like(xb)
B, H, S, D = 8, 32, 4096, 128
qq = torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
kk = torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
vv = torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16, requires_grad=True)
go = torch.randn(B, H, S, D, device=dev, dtype=torch.bfloat16)
attn_fwd_flops = 4.0 * B * H * S * S * D / 2  # causal: half the score matrix


def attn(p, bwd):
    def f():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            if bwd:
                F.scaled_dot_product_attention(qq, kk, vv, dropout_p=p, is_causal=True).backward(go)
            else:
                with torch.no_grad():
                    F.scaled_dot_product_attention(qq, kk, vv, dropout_p=p, is_causal=True)
    return f


def dropout():
    F.dropout(xb, 0.1, training=True)


def copy():
    yb.copy_(xb)


def gemm():
    torch.mm(a, b)


cases = [  # name, fn, (unit, amount per call)
    ("gemm", gemm, ("TFLOP/s", 2.0 * n ** 3 / 1e12)),
    ("stream-copy", copy, ("GB/s", 4.0 * (512 << 20) / 1e9)),
    ("dropout", dropout, ("GB/s", 5.0 * (512 << 20) / 1e9)),  # read 2, write 2 + a 1-byte mask
    ("attn-fwd", attn(0.0, False), ("TFLOP/s", attn_fwd_flops / 1e12)),
    ("attn-fwd-drop", attn(0.1, False), ("TFLOP/s", attn_fwd_flops / 1e12)),
    ("attn-fwdbwd", attn(0.0, True), ("TFLOP/s", 3.5 * attn_fwd_flops / 1e12)),
    ("attn-fwdbwd-drop", attn(0.1, True), ("TFLOP/s", 3.5 * attn_fwd_flops / 1e12)),
]


run_cases(cases, f"{out}/power_dropout.json", width=18)
