#include "real_backend/cudnn_attention.h"

#if CLUSTERSIM_HAVE_CUDNN_HEADERS

#include <dlfcn.h>

#include <limits>
#include <string>
#include <type_traits>

#include "real_backend/cudnn_graph.h"

namespace clustersim::real::cudnn {

std::string version_text(size_t v) {
  return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." + std::to_string(v % 100);
}

// Opens the library and resolves every entry point; false with `why` when it cannot.
bool open_api(const std::string& path, Api& api, CudnnLoad& load) {
  load = CudnnLoad{};
  dlerror();
  api.lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!api.lib) {
    const char* e = dlerror();
    load.reason = "cannot load " + path + ": " + (e ? e : "dlopen failed");
    return false;
  }
  std::string missing;
  auto sym = [&](auto& f, const char* name) {
    f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(api.lib, name));
    if (!f) missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  sym(api.get_version, "cudnnGetVersion");
  sym(api.error_string, "cudnnGetErrorString");
  sym(api.last_error, "cudnnGetLastErrorString");
  sym(api.create, "cudnnCreate");
  sym(api.set_stream, "cudnnSetStream");
  sym(api.create_desc, "cudnnBackendCreateDescriptor");
  sym(api.destroy_desc, "cudnnBackendDestroyDescriptor");
  sym(api.set_attr, "cudnnBackendSetAttribute");
  sym(api.get_attr, "cudnnBackendGetAttribute");
  sym(api.finalize, "cudnnBackendFinalize");
  sym(api.execute, "cudnnBackendExecute");
  if (!missing.empty()) {
    load.reason = path + " lacks " + missing;
    dlclose(api.lib);
    api = Api{};
    return false;
  }
  load.version = api.get_version();
  load.version_text = version_text(load.version);
  if (load.version < 90000) {
    load.reason = path + " is cuDNN " + load.version_text + "; the fused attention graphs here need cuDNN 9";
    dlclose(api.lib);
    api = Api{};
    return false;
  }
  load.available = true;
  return true;
}

namespace {

// Top-left causal mask on `s` (row ≥ column kept, the rest −inf), as cudnn-frontend's
// composite diagonal-band mask builds it.
cudnnBackendDescriptor_t causal_mask(Graph& g, const Shape& sh, cudnnBackendDescriptor_t s,
                                     cudnnBackendDescriptor_t neg_inf) {
  cudnnBackendDescriptor_t row = g.virt(CUDNN_DATA_INT32, sh.s_dims(), sh.s_strides());
  cudnnBackendDescriptor_t col = g.virt(CUDNN_DATA_INT32, sh.s_dims(), sh.s_strides());
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, row, nullptr, nullptr, CUDNN_DATA_FLOAT, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, col, nullptr, nullptr, CUDNN_DATA_FLOAT, 3);
  cudnnBackendDescriptor_t keep = g.virt(CUDNN_DATA_BOOLEAN, sh.s_dims(), sh.s_strides());
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, keep, col, nullptr, CUDNN_DATA_BOOLEAN);
  cudnnBackendDescriptor_t out = g.virt(CUDNN_DATA_FLOAT, sh.s_dims(), sh.s_strides());
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, out, neg_inf, keep);
  return out;
}

}  // namespace

// O = softmax(scale · Q·Kᵀ, causal) · V, with the softmax statistics (max + log Σexp).
void forward_graph(Graph& g, const Shape& sh, cudnnDataType_t io) {
  const cudnnDataType_t F = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t q = g.tensor(kQ, io, sh.q_dims(), sh.q_strides(), false);
  cudnnBackendDescriptor_t kt = g.tensor(kK, io, sh.kvt_dims(), sh.kvt_strides(), false);
  cudnnBackendDescriptor_t v = g.tensor(kV, io, sh.kv_dims(), sh.kv_strides(), false);
  cudnnBackendDescriptor_t o = g.tensor(kO, io, sh.q_dims(), sh.q_strides(), false);
  cudnnBackendDescriptor_t stats = g.tensor(kStats, F, sh.row_dims(), sh.row_strides(), false);
  cudnnBackendDescriptor_t scale = g.scalar(kScale);
  cudnnBackendDescriptor_t s = g.virt(F, sh.s_dims(), sh.s_strides());
  g.matmul(q, kt, s);
  cudnnBackendDescriptor_t scaled = g.virt(F, sh.s_dims(), sh.s_strides());
  g.pointwise(CUDNN_POINTWISE_MUL, s, scaled, scale);
  cudnnBackendDescriptor_t last = scaled;
  if (sh.causal) last = causal_mask(g, sh, last, g.scalar(kNegInf));
  cudnnBackendDescriptor_t mx = g.virt(F, sh.row_dims(), sh.row_strides());
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, last, mx);
  cudnnBackendDescriptor_t sub = g.virt(F, sh.s_dims(), sh.s_strides());
  g.pointwise(CUDNN_POINTWISE_SUB, last, sub, mx);
  cudnnBackendDescriptor_t ex = g.virt(F, sh.s_dims(), sh.s_strides());
  g.pointwise(CUDNN_POINTWISE_EXP, sub, ex);
  cudnnBackendDescriptor_t sum = g.virt(F, sh.row_dims(), sh.row_strides());
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, ex, sum);
  cudnnBackendDescriptor_t lg = g.virt(F, sh.row_dims(), sh.row_strides());
  g.pointwise(CUDNN_POINTWISE_LOG, sum, lg);
  g.pointwise(CUDNN_POINTWISE_ADD, mx, stats, lg);
  cudnnBackendDescriptor_t p = g.virt(io, sh.s_dims(), sh.s_strides());  // bmm2's A in the i/o type
  g.pointwise(CUDNN_POINTWISE_DIV, ex, p, sum);
  g.matmul(p, v, o);
}

// dQ, dK, dV from dO, with the forward's statistics: cudnn-frontend's SDPA backward.
void backward_graph(Graph& g, const Shape& sh, cudnnDataType_t io, unsigned variant) {
  const cudnnDataType_t F = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t q = g.tensor(kQ, io, sh.q_dims(), sh.q_strides(), false);
  cudnnBackendDescriptor_t kt = g.tensor(kK, io, sh.kvt_dims(), sh.kvt_strides(), false);
  cudnnBackendDescriptor_t vt = g.tensor(kV, io, sh.kvt_dims(), sh.kvt_strides(), false);
  cudnnBackendDescriptor_t o = g.tensor(kO, io, sh.q_dims(), sh.q_strides(), false);
  cudnnBackendDescriptor_t dout = g.tensor(kDO, io, sh.q_dims(), sh.q_strides(), false);
  cudnnBackendDescriptor_t stats = g.tensor(kStats, F, sh.row_dims(), sh.row_strides(), false);
  cudnnBackendDescriptor_t dq = g.tensor(kDQ, io, sh.q_dims(), sh.q_strides(), false);
  cudnnBackendDescriptor_t dk = g.tensor(kDK, io, sh.kv_dims(), sh.kv_strides(), false);
  cudnnBackendDescriptor_t dv = g.tensor(kDV, io, sh.kv_dims(), sh.kv_strides(), false);
  cudnnBackendDescriptor_t rowsum = g.tensor(kRowSum, F, sh.row_dims(), sh.row_strides(), false);
  cudnnBackendDescriptor_t dq_accum = g.tensor(kDQAccum, F, sh.q_dims(), sh.q_strides(), false);
  cudnnBackendDescriptor_t scale = g.scalar(kScale);
  cudnnBackendDescriptor_t one = g.scalar(kOne);

  // rowsum = Σ_d dO∘O
  cudnnBackendDescriptor_t d_o = g.virt(F, sh.q_dims(), sh.q_strides());
  g.pointwise(CUDNN_POINTWISE_MUL, dout, d_o, o);
  cudnnBackendDescriptor_t red = g.virt(F, sh.row_dims(), sh.row_strides());
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, d_o, red);
  g.pointwise(CUDNN_POINTWISE_MUL, red, rowsum, one);

  // P = exp(scale · Q·Kᵀ − stats), masked
  cudnnBackendDescriptor_t s = g.virt(F, sh.s_dims(), sh.s_strides());
  g.matmul(q, kt, s);
  cudnnBackendDescriptor_t scaled = g.virt(F, sh.s_dims(), sh.s_strides());
  g.pointwise(CUDNN_POINTWISE_MUL, s, scaled, scale);
  cudnnBackendDescriptor_t centered = g.virt(F, sh.s_dims(), sh.s_strides());
  g.pointwise(CUDNN_POINTWISE_SUB, scaled, centered, stats);
  cudnnBackendDescriptor_t last = centered;
  if (sh.causal) last = causal_mask(g, sh, last, g.scalar(kNegInf));
  cudnnBackendDescriptor_t p = g.virt(F, sh.s_dims(), sh.s_strides());
  g.pointwise(CUDNN_POINTWISE_EXP, last, p);

  // dV = Pᵀ·dO (summed over each group's query heads for GQA)
  cudnnBackendDescriptor_t pt = g.virt(io, sh.st_dims(), sh.st_strides());
  g.reshape(p, pt);
  if (sh.h == sh.hk) {
    g.matmul(pt, dout, dv);
  } else {
    cudnnBackendDescriptor_t full = g.virt(io, sh.full_kv_dims(), sh.full_kv_strides());
    g.matmul(pt, dout, full);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, dv);
  }

  // dS = P∘(dO·Vᵀ − rowsum)·scale
  cudnnBackendDescriptor_t dp = g.virt(F, sh.s_dims(), sh.s_strides());
  g.matmul(dout, vt, dp);
  cudnnBackendDescriptor_t dps = g.virt(F, sh.s_dims(), sh.s_strides());
  g.pointwise(CUDNN_POINTWISE_SUB, dp, dps, rowsum);
  cudnnBackendDescriptor_t dpp = g.virt(F, sh.s_dims(), sh.s_strides());
  g.pointwise(CUDNN_POINTWISE_MUL, dps, dpp, p);
  cudnnBackendDescriptor_t ds = g.virt(F, sh.s_dims(), sh.s_strides());
  g.pointwise(CUDNN_POINTWISE_MUL, dpp, ds, scale);

  // dK = dSᵀ·Q (summed over the group for GQA)
  cudnnBackendDescriptor_t dst = g.virt(io, sh.st_dims(), sh.st_strides());
  g.reshape(ds, dst);
  if (sh.h == sh.hk) {
    g.matmul(dst, q, dk);
  } else {
    cudnnBackendDescriptor_t full = g.virt(io, sh.full_kv_dims(), sh.full_kv_strides());
    g.matmul(dst, q, full);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, dk);
  }

  // dQ = dS·K into the fp32 accumulator, then converted
  cudnnBackendDescriptor_t kn = g.virt((variant & 1) ? io : F, sh.kv_dims(), sh.kv_strides());
  g.reshape(kt, kn);
  g.matmul(ds, kn, dq_accum);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, dq_accum, dq);
}

}  // namespace clustersim::real::cudnn

#endif
