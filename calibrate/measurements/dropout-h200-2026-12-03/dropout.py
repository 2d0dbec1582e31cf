# PyTorch's dropout kernels (torch.nn.functional.dropout in training: native_dropout's
# output and 1-byte mask; its backward, native_dropout_backward) on FP16/BF16 tensors of
# the attention-probability size, against a device copy of the same tensor: is dropout a
# stream at copy rate, or does its random-number generation (Philox, per 4 elements) cost
# extra time per element? The extra, if any, is reported in FP32-op slots per element at
# the GPU's FP32 rate (docs/model.md, "Kernel classes"), so it can be carried to a GPU
# with another ratio of arithmetic to bandwidth.
import json, sys, torch

def timed(fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) * 1e-3)
    ts.sort()
    return ts[len(ts) // 2]

peak_fp32 = float(sys.argv[1]) if len(sys.argv) > 1 else 67e12  # H200 SXM: 67 TFLOP/s FP32
dev = torch.device("cuda")
print(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "peak_fp32": peak_fp32}))
for dtype in (torch.float16, torch.bfloat16):
    for n in (1 << 26, 1 << 28, 3 << 28):  # 64 M .. 768 M elements: 128 MB .. 1.5 GB a tensor
        x = torch.randn(n, device=dev, dtype=dtype)
        y = torch.empty_like(x)
        e = x.element_size()
        copy_s = timed(lambda: y.copy_(x))
        rate = 2 * n * e / copy_s  # bytes moved per second
        fwd_s = timed(lambda: torch.nn.functional.dropout(x, p=0.1, training=True))
        out, mask = torch.ops.aten.native_dropout(x, 0.1, True)
        bwd_s = timed(lambda: torch.ops.aten.native_dropout_backward(x, mask, 1.0 / 0.9))
        fwd_bytes = n * (2 * e + 1)        # read x; write out and the mask
        bwd_bytes = n * (2 * e + 1)        # read grad and mask; write grad
        row = {"dtype": str(dtype).split(".")[-1], "elements": n, "copy_GBps": rate / 1e9,
               "forward_us": fwd_s * 1e6, "backward_us": bwd_s * 1e6,
               "forward_over_stream": fwd_s / (fwd_bytes / rate), "backward_over_stream": bwd_s / (bwd_bytes / rate),
               "forward_extra_fp32_ops_per_element": max(0.0, fwd_s - fwd_bytes / rate) * peak_fp32 / n,
               "backward_extra_fp32_ops_per_element": max(0.0, bwd_s - bwd_bytes / rate) * peak_fp32 / n}
        print(json.dumps(row), flush=True)
        del x, y, out, mask
        torch.cuda.empty_cache()
