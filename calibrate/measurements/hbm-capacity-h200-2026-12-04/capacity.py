"""The memory one H200 reports: CUDA's total (cudaMemGetInfo, what PyTorch, vLLM and
TensorRT-LLM budget from), NVML's total, and what a process holds once CUDA, cuBLAS and a
first GEMM are up (the free memory it sees then)."""
import subprocess

import torch

GiB = 1024.0 ** 3
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,memory.reserved,driver_version",
                      "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
print("nvidia-smi:", smi)
free0, total = torch.cuda.mem_get_info()
print(f"cudaMemGetInfo total {total} B = {total / GiB:.3f} GiB = {total / 1e9:.3f} GB")
print(f"free after context creation {free0 / GiB:.3f} GiB, held {(total - free0) / GiB:.3f} GiB")
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = a @ a
torch.cuda.synchronize()
free1, _ = torch.cuda.mem_get_info()
tensors = torch.cuda.memory_allocated()
print(f"free after a BF16 GEMM {free1 / GiB:.3f} GiB, held {(total - free1) / GiB:.3f} GiB "
      f"of which tensors {tensors / GiB:.3f} GiB, PyTorch's pool {torch.cuda.memory_reserved() / GiB:.3f} GiB")
print("props total_memory", torch.cuda.get_device_properties(0).total_memory)
