// cuDNN's fused flash attention (forward and backward) for the real backend, loaded at
// run time: libcudnn.so.9 is opened with dlopen and every entry point is resolved with
// dlsym, so nothing links against cuDNN and a machine without it runs the backend's own
// kernel (kernels.h). The operation graphs are built with cuDNN's backend descriptor API
// (the graph cudnn-frontend builds for SDPA on cuDNN 9.x: Q·Kᵀ, scale, causal mask,
// softmax with its statistics, ·V; the backward with the dO·O row sums, dV = Pᵀ·dO,
// dS = P∘(dP − rowsum)·scale, dQ = dS·K through an fp32 accumulator, dK = dSᵀ·Q; for GQA
// dK and dV are summed over each group's query heads), one execution plan per shape,
// built once and kept, with one workspace per GPU.
//
// Statistics: the backend's own kernel keeps lse in the log2 domain; cuDNN's `stats` are
// the natural-log softmax statistics (max + log Σexp). The backward must be given what
// the forward of the SAME backend wrote. The dispatchers below therefore choose one
// backend per shape, for forward and backward together: cuDNN only when both of its
// plans build.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>

#include "real_backend/kernels.h"

namespace clustersim::real {

enum class AttentionBackend { Own, Cudnn };
// Which backend the dispatchers use: Auto takes cuDNN where it loads and supports the
// shape, else the own kernel; Own never loads cuDNN; Cudnn fails (RealBackendError) where
// cuDNN cannot run a shape. Default: the environment variable CLUSTERSIM_ATTENTION
// (own, cudnn or auto), else Auto.
enum class AttentionChoice { Auto, Own, Cudnn };

const char* to_string(AttentionBackend b);
// "own", "cudnn" or "auto"; false for anything else.
bool parse_attention_choice(const std::string& text, AttentionChoice& out);
AttentionChoice attention_choice();
void set_attention_choice(AttentionChoice c);

// The library, loaded (or not) with the reason. `path` is what dlopen is given.
struct CudnnLoad {
  bool available = false;
  std::string reason;        // why not, when not available
  size_t version = 0;        // cudnnGetVersion(), e.g. 91900
  std::string version_text;  // "9.19.0"
};
// Opens `path` and resolves every entry point used, then closes it again: what a load
// from that path would give (tests use it with paths that do not exist).
CudnnLoad probe_cudnn_library(const std::string& path);
// The process's library: CLUSTERSIM_CUDNN_LIBRARY if set, else "libcudnn.so.9"; loaded on
// the first call and kept. Never throws.
const CudnnLoad& cudnn_library();

// What profiles and messages call each backend: "cudnn-9.19.0 fused flash attention" and
// "clustersim fused attention (WMMA, tiles of 64)" (profile_warning keys on the
// "clustersim" prefix).
std::string attention_backend_name(AttentionBackend b);

// cuDNN directly, for tests and the dispatchers. Return false with `why` set when cuDNN
// cannot run the shape here (not loaded, graph not supported, plan fails); CUDA errors
// and failing executions throw RealBackendError. Tensors as in kernels.h; `stats` is
// [b, h, q] fp32, natural log. The backward also takes `rowsum` ([b, h, q] fp32, dO·O per
// row) and `dq_accum` ([b, h, q, d] fp32) as its scratch, writes dq16/dk16/dv16.
bool cudnn_attention_forward(Elem e, const AttentionShape& s, const void* q, const void* k, const void* v, void* o,
                             float* stats, cudaStream_t stream, std::string* why);
bool cudnn_attention_backward(Elem e, const AttentionShape& s, const void* q, const void* k, const void* v,
                              const void* o, const void* dout, const float* stats, float* rowsum, float* dq_accum,
                              void* dq16, void* dk16, void* dv16, cudaStream_t stream, std::string* why);
// Whether cuDNN runs this shape's forward and backward (building both plans on the first
// call for a shape), for 16-byte aligned tensors.
bool cudnn_attention_supported(Elem e, const AttentionShape& s, std::string* why);
// Diagnostics: the engine cuDNN's heuristics chose for a shape (its plan's JSON, abridged,
// with the workspace size), or why there is no plan.
std::string cudnn_attention_plan_info(Elem e, const AttentionShape& s, bool backward);
// Diagnostics without a GPU: builds and finalizes every tensor and operation of a graph
// (the operation graph itself needs a handle, hence a GPU); "" when all finalize, else
// what failed.
std::string cudnn_attention_check_operations(Elem e, const AttentionShape& s, bool backward);
// Diagnostics: build the graphs differently (bit 0: K read back for dQ in the i/o type
// rather than fp32); drops every plan built so far. Also CLUSTERSIM_CUDNN_VARIANT.
void set_cudnn_graph_variant(unsigned bits);

// The dispatchers the executor and the calibration call: the own kernel's signature,
// the backend that ran returned. With cuDNN, lse holds natural-log statistics, delta the
// dO·O row sums and dq the fp32 dQ accumulator; dk and dv are not used.
AttentionBackend attention_backend_for(Elem e, const AttentionShape& s);
AttentionBackend run_attention_forward(Elem e, const AttentionShape& s, const void* q, const void* k, const void* v,
                                       void* o, float* lse, cudaStream_t stream);
AttentionBackend run_attention_backward(Elem e, const AttentionShape& s, const void* q, const void* k, const void* v,
                                        const void* o, const void* dout, const float* lse, float* delta, float* dq,
                                        float* dk, float* dv, void* dq16, void* dk16, void* dv16, cudaStream_t stream);

}  // namespace clustersim::real
