# Fused attention (PyTorch SDPA: cuDNN and FlashAttention-2) beside a kernel that holds k
# SMs, as an NCCL kernel's channels do: k blocks of 512 threads and 120 KiB of shared memory
# (one per SM) copying device memory until a flag in device memory stops them. Causal,
# 16 heads of 128, BF16; forward and backward (autograd.grad of a saved forward). Each
# sample is timed alone and beside the blocks, interleaved, 7 rounds, medians. Prints CSV.
import time, torch
from torch.utils.cpp_extension import load_inline
from torch.nn.attention import sdpa_kernel, SDPBackend
import torch.nn.functional as F

cuda_src = r'''
#include <cuda_runtime.h>
#include <torch/extension.h>
__global__ void hold(const int4* src, int4* dst, long per_block, volatile int* stop) {
  extern __shared__ int4 smem[];
  const long base = (long)blockIdx.x * per_block;
  while (true) {
    for (long i = threadIdx.x; i < per_block; i += blockDim.x) dst[base + i] = src[base + i];
    __syncthreads();
    if (*stop) break;
  }
  if (threadIdx.x == 0) smem[0] = make_int4(0, 0, 0, 0);
}
void launch_hold(torch::Tensor src, torch::Tensor dst, torch::Tensor stop, int64_t blocks, int64_t stream_ptr) {
  const long per_block = src.numel() * src.element_size() / 16 / blocks;
  const int smem = 120 << 10;
  cudaFuncSetAttribute(hold, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  hold<<<blocks, 512, smem, (cudaStream_t)stream_ptr>>>((const int4*)src.data_ptr(), (int4*)dst.data_ptr(),
                                                         per_block, (volatile int*)stop.data_ptr());
}
'''
cpp_src = "void launch_hold(torch::Tensor src, torch::Tensor dst, torch::Tensor stop, int64_t blocks, int64_t stream_ptr);"
ext = load_inline("hold_ext", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["launch_hold"],
                  extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"], verbose=False)

dev = "cuda"
side = torch.cuda.Stream()
src = torch.ones(40 * (48 << 20) // 4, dtype=torch.int32, device=dev)
dst = torch.empty_like(src)
stop = torch.zeros(1, dtype=torch.int32, device=dev)
print("gpu,%s" % torch.cuda.get_device_name(0))
print("backend,seq,batch,pass,blocks,ms_alone,ms_beside,ratio")
heads, d = 16, 128
for seq, batch in [(2048, 12), (8192, 3)]:
    q = torch.randn(batch, heads, seq, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn_like(q, requires_grad=True)
    v = torch.randn_like(q, requires_grad=True)
    do = torch.randn_like(q)
    for name, be in [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash2", SDPBackend.FLASH_ATTENTION)]:
        with sdpa_kernel([be]):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            def fwd():
                F.scaled_dot_product_attention(q, k, v, is_causal=True)
            def bwd():
                torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
            for _ in range(3):
                fwd(); bwd()
            torch.cuda.synchronize()
            for label, fn in [("forward", fwd), ("backward", bwd)]:
                for blocks in [1, 2, 4, 8, 16, 24]:
                    alone, beside = [], []
                    for _ in range(7):
                        for with_blocks in (False, True):
                            time.sleep(0.02)
                            if with_blocks:
                                stop.zero_()
                                torch.cuda.synchronize()
                                ext.launch_hold(src, dst, stop, blocks, side.cuda_stream)
                                time.sleep(0.002)
                            e0 = torch.cuda.Event(enable_timing=True)
                            e1 = torch.cuda.Event(enable_timing=True)
                            e0.record()
                            for _ in range(4):
                                fn()
                            e1.record()
                            e1.synchronize()
                            if with_blocks:
                                stop.fill_(1)
                            torch.cuda.synchronize()
                            (beside if with_blocks else alone).append(e0.elapsed_time(e1) / 4)
                    alone.sort(); beside.sort()
                    a, b = alone[3], beside[3]
                    print("%s,%d,%d,%s,%d,%.4f,%.4f,%.3f" % (name, seq, batch, label, blocks, a, b, b / a), flush=True)
