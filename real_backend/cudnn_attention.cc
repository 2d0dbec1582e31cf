#include "real_backend/cudnn_attention.h"

#include <dlfcn.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <type_traits>
#include <vector>

#include "real_backend/check.h"

#if CLUSTERSIM_HAVE_CUDNN_HEADERS
#include <cudnn_graph.h>
#endif

namespace clustersim::real {

const char* to_string(AttentionBackend b) { return b == AttentionBackend::Cudnn ? "cudnn" : "own"; }

bool parse_attention_choice(const std::string& text, AttentionChoice& out) {
  if (text == "auto")
    out = AttentionChoice::Auto;
  else if (text == "own")
    out = AttentionChoice::Own;
  else if (text == "cudnn")
    out = AttentionChoice::Cudnn;
  else
    return false;
  return true;
}

namespace {

std::mutex g_choice_mu;
bool g_choice_set = false;
AttentionChoice g_choice = AttentionChoice::Auto;

}  // namespace

AttentionChoice attention_choice() {
  std::lock_guard<std::mutex> lock(g_choice_mu);
  if (!g_choice_set) {
    g_choice_set = true;
    const char* env = std::getenv("CLUSTERSIM_ATTENTION");
    if (env && *env && !parse_attention_choice(env, g_choice))
      throw RealBackendError(std::string("CLUSTERSIM_ATTENTION='") + env + "': expected own, cudnn or auto");
  }
  return g_choice;
}

void set_attention_choice(AttentionChoice c) {
  std::lock_guard<std::mutex> lock(g_choice_mu);
  g_choice_set = true;
  g_choice = c;
}

#if CLUSTERSIM_HAVE_CUDNN_HEADERS

namespace {

// The cuDNN entry points used, resolved with dlsym.
struct Api {
  void* lib = nullptr;
  size_t (*get_version)() = nullptr;
  const char* (*error_string)(cudnnStatus_t) = nullptr;
  void (*last_error)(char*, size_t) = nullptr;
  cudnnStatus_t (*create)(cudnnHandle_t*) = nullptr;
  cudnnStatus_t (*set_stream)(cudnnHandle_t, cudaStream_t) = nullptr;
  cudnnStatus_t (*create_desc)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t*) = nullptr;
  cudnnStatus_t (*destroy_desc)(cudnnBackendDescriptor_t) = nullptr;
  cudnnStatus_t (*set_attr)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t, int64_t,
                            const void*) = nullptr;
  cudnnStatus_t (*get_attr)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t, int64_t,
                            int64_t*, void*) = nullptr;
  cudnnStatus_t (*finalize)(cudnnBackendDescriptor_t) = nullptr;
  cudnnStatus_t (*execute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t) = nullptr;

  // "CUDNN_STATUS_NOT_SUPPORTED (…cuDNN's last error message…)".
  std::string describe(cudnnStatus_t st) const {
    std::string s = error_string ? error_string(st) : ("status " + std::to_string(static_cast<int>(st)));
    if (last_error) {
      char buf[1024] = {};
      last_error(buf, sizeof buf);
      if (buf[0]) s += std::string(" (") + buf + ")";
    }
    return s;
  }
};

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

// Tensor unique ids of the graphs' non-virtual tensors (virtual ones count from 100).
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kDO,
  kDQ,
  kDK,
  kDV,
  kScale,
  kNegInf,
  kOne,
  kRowSum,
  kDQAccum,
};

using Dims = std::array<int64_t, 4>;

// Builds one operation graph: every descriptor made is kept (and destroyed with it).
class Graph {
 public:
  explicit Graph(const Api& api) : api_(api) {}
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph() {
    for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) api_.destroy_desc(*it);
  }

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  void fail(const std::string& what) {
    if (error_.empty()) error_ = what;
  }

  cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t t, const char* what) {
    cudnnBackendDescriptor_t d = nullptr;
    if (!ok()) return nullptr;
    const cudnnStatus_t st = api_.create_desc(t, &d);
    if (st != CUDNN_STATUS_SUCCESS) {
      fail(std::string("creating the ") + what + " descriptor: " + api_.describe(st));
      return nullptr;
    }
    owned_.push_back(d);
    return d;
  }
  void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
           int64_t count, const void* values, const char* what) {
    if (!ok() || !d) return;
    const cudnnStatus_t st = api_.set_attr(d, name, type, count, values);
    if (st != CUDNN_STATUS_SUCCESS)
      fail(std::string("setting ") + what + " (attribute " + std::to_string(static_cast<int>(name)) +
           "): " + api_.describe(st));
  }
  void done(cudnnBackendDescriptor_t d, const std::string& what) {
    if (!ok() || !d) return;
    const cudnnStatus_t st = api_.finalize(d);
    if (st != CUDNN_STATUS_SUCCESS) fail("finalizing " + what + ": " + api_.describe(st));
  }
  void set_desc(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t v,
                const char* what) {
    set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v, what);
  }

  cudnnBackendDescriptor_t tensor(int64_t uid, cudnnDataType_t type, const Dims& dims, const Dims& strides,
                                  bool is_virtual, bool by_value = false) {
    cudnnBackendDescriptor_t t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor");
    set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor data type");
    set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data(), "tensor dimensions");
    set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data(), "tensor strides");
    set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor unique id");
    const int64_t align = by_value ? 16 : alignment_;
    set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
    if (is_virtual) {
      const bool v = true;
      set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v, "tensor is-virtual");
    }
    if (by_value) {
      const bool v = true;
      set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &v, "tensor is-by-value");
    }
    done(t, "tensor " + std::to_string(uid));
    return t;
  }
  cudnnBackendDescriptor_t virt(cudnnDataType_t type, const Dims& dims, const Dims& strides) {
    return tensor(next_uid_++, type, dims, strides, true);
  }
  // A float scalar passed by value: [1, 1, 1, 1].
  cudnnBackendDescriptor_t scalar(int64_t uid) {
    return tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
  }

  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    cudnnBackendDescriptor_t m = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul");
    const cudnnDataType_t f = CUDNN_DATA_FLOAT;
    set(m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f, "matmul compute type");
    done(m, "matmul descriptor");
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul operation");
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a, "matmul A");
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b, "matmul B");
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c, "matmul C");
    set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, m, "matmul descriptor");
    add(op, "matmul operation");
  }

  void pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y,
                 cudnnBackendDescriptor_t b = nullptr, cudnnBackendDescriptor_t t = nullptr,
                 cudnnDataType_t math = CUDNN_DATA_FLOAT, int64_t axis = -1) {
    cudnnBackendDescriptor_t p = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise");
    set(p, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
    set(p, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math, "pointwise math precision");
    if (mode == CUDNN_POINTWISE_GEN_INDEX) set(p, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "axis");
    done(p, "pointwise descriptor (mode " + std::to_string(static_cast<int>(mode)) + ")");
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise operation");
    set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, p, "pointwise descriptor");
    set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x, "pointwise X");
    if (b) set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b, "pointwise B");
    if (t) set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t, "pointwise T");
    set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y, "pointwise Y");
    const float one = 1.f;
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one, "alpha1");
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one, "alpha2");
    add(op, "pointwise operation (mode " + std::to_string(static_cast<int>(mode)) + ")");
  }

  void reduction(cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t r = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction");
    const cudnnDataType_t f = CUDNN_DATA_FLOAT;
    set(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f, "reduction compute type");
    set(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, "reduction operator");
    if (version_ >= 91100) {
      const bool deterministic = false;
      set(r, CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, CUDNN_TYPE_BOOLEAN, 1, &deterministic, "reduction determinism");
    }
    done(r, "reduction descriptor");
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction operation");
    set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, r, "reduction descriptor");
    set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x, "reduction X");
    set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y, "reduction Y");
    add(op, "reduction operation");
  }

  void reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "reshape operation");
    set_desc(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x, "reshape X");
    set_desc(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y, "reshape Y");
    add(op, "reshape operation");
  }

  // The operation graph of every operation added, finalized for `handle`.
  cudnnBackendDescriptor_t graph(cudnnHandle_t handle) {
    cudnnBackendDescriptor_t g = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    set(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops_.size()), ops_.data(),
        "graph operations");
    set(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "graph handle");
    done(g, "the operation graph (" + std::to_string(ops_.size()) + " operations)");
    return g;
  }

  void set_alignment(int64_t a) { alignment_ = a; }
  void set_version(size_t v) { version_ = v; }

 private:
  void add(cudnnBackendDescriptor_t op, const std::string& what) {
    done(op, what);
    if (ok()) ops_.push_back(op);
  }

  const Api& api_;
  std::vector<cudnnBackendDescriptor_t> owned_, ops_;
  std::string error_;
  int64_t next_uid_ = 100;
  int64_t alignment_ = 16;
  size_t version_ = 0;
};

// The shapes a graph is built for.
struct Shape {
  int64_t b, h, hk, sq, skv, d;
  bool causal;
  Dims q_dims() const { return {b, h, sq, d}; }
  Dims q_strides() const { return {h * sq * d, sq * d, d, 1}; }
  Dims kv_dims() const { return {b, hk, skv, d}; }
  Dims kv_strides() const { return {hk * skv * d, skv * d, d, 1}; }
  // K (and V) read as their transposes: [b, hk, d, skv] over the same memory.
  Dims kvt_dims() const { return {b, hk, d, skv}; }
  Dims kvt_strides() const { return {hk * skv * d, skv * d, 1, d}; }
  Dims s_dims() const { return {b, h, sq, skv}; }
  Dims s_strides() const { return {h * sq * skv, sq * skv, skv, 1}; }
  Dims st_dims() const { return {b, h, skv, sq}; }  // Sᵀ over S's memory
  Dims st_strides() const { return {h * sq * skv, sq * skv, 1, skv}; }
  Dims row_dims() const { return {b, h, sq, 1}; }
  Dims row_strides() const { return {h * sq, sq, 1, 1}; }
  Dims full_kv_dims() const { return {b, h, skv, d}; }  // dK, dV per query head (GQA)
  Dims full_kv_strides() const { return {h * skv * d, skv * d, d, 1}; }
};

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

// Graph variants for diagnosis (CLUSTERSIM_CUDNN_VARIANT): bit 0 reads K back (for dQ)
// in the i/o type instead of fp32.
unsigned g_variant = 0;

// dQ, dK, dV from dO, with the forward's statistics: cudnn-frontend's SDPA backward.
void backward_graph(Graph& g, const Shape& sh, cudnnDataType_t io) {
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
  cudnnBackendDescriptor_t kn = g.virt((g_variant & 1) ? io : F, sh.kv_dims(), sh.kv_strides());
  g.reshape(kt, kn);
  g.matmul(ds, kn, dq_accum);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, dq_accum, dq);
}

// One built execution plan and everything it was built from.
struct Plan {
  explicit Plan(const Api& a) : api(a) {}
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (plan) api.destroy_desc(plan);
  }
  const Api& api;
  bool ok = false;
  std::string why;   // when not ok
  std::string info;  // the plan's JSON (engine and knobs), abridged
  std::unique_ptr<Graph> graph;
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace = 0;
  float scale = 1.f, one = 1.f, neg_inf = -std::numeric_limits<float>::infinity();
};

using PlanKey = std::array<int64_t, 10>;  // elem, b, h, hk, sq, skv, d, causal, backward, alignment
using ShapeKey = std::array<int64_t, 8>;  // elem, b, h, hk, sq, skv, d, causal

// Per GPU: the handle, the plans, one workspace per stream.
struct Device {
  std::mutex mu;
  cudnnHandle_t handle = nullptr;
  std::string why;  // handle creation failed
  std::map<PlanKey, std::unique_ptr<Plan>> plans;
  std::map<ShapeKey, std::pair<bool, std::string>> supported;
  std::map<cudaStream_t, std::pair<void*, size_t>> workspaces;
};

struct Runtime {
  std::mutex mu;
  bool tried = false;
  Api api;
  CudnnLoad load;
  std::map<int, std::unique_ptr<Device>> devices;
};

Runtime& runtime() {
  static Runtime* r = new Runtime;  // never destroyed: plans outlive static destruction order
  return *r;
}

std::string library_path() {
  const char* env = std::getenv("CLUSTERSIM_CUDNN_LIBRARY");
  return env && *env ? env : "libcudnn.so.9";
}

// The loaded library, or nullptr with `why`.
const Api* api_or_why(std::string* why) {
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.tried) {
    r.tried = true;
    open_api(library_path(), r.api, r.load);
    if (const char* v = std::getenv("CLUSTERSIM_CUDNN_VARIANT")) g_variant = static_cast<unsigned>(std::atoi(v));
  }
  if (!r.load.available) {
    if (why) *why = r.load.reason;
    return nullptr;
  }
  return &r.api;
}

Device* device_or_why(const Api& api, std::string* why) {
  int dev = 0;
  CS_CUDA(cudaGetDevice(&dev));
  Runtime& r = runtime();
  Device* d = nullptr;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto& slot = r.devices[dev];
    if (!slot) {
      slot = std::make_unique<Device>();
      const cudnnStatus_t st = api.create(&slot->handle);
      if (st != CUDNN_STATUS_SUCCESS) {
        slot->handle = nullptr;
        slot->why = "cudnnCreate on GPU " + std::to_string(dev) + ": " + api.describe(st);
      }
    }
    d = slot.get();
  }
  if (!d->handle) {
    if (why) *why = d->why;
    return nullptr;
  }
  return d;
}

std::string plan_json(const Api& api, cudnnBackendDescriptor_t plan) {
  int64_t n = 0;
  if (api.get_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, 0, &n, nullptr) !=
          CUDNN_STATUS_SUCCESS ||
      n <= 0)
    return {};
  std::string s(static_cast<size_t>(n), '\0');
  if (api.get_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, n, &n, s.data()) !=
      CUDNN_STATUS_SUCCESS)
    return {};
  s.resize(std::min(static_cast<size_t>(n), s.find('\0')));
  // The tensors come first and are known; the engine and its knobs come last.
  return s.size() > 300 ? "…" + s.substr(s.size() - 300) : s;
}

// The engine configuration's tag as cudnn-frontend writes it: "eng<global index>" and
// "_k<knob type>=<value>" per knob choice.
std::string engine_tag(const Api& api, cudnnBackendDescriptor_t cfg) {
  std::string tag;
  cudnnBackendDescriptor_t eng = nullptr;
  if (api.create_desc(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) != CUDNN_STATUS_SUCCESS) return tag;
  int64_t n = 0, id = -1;
  if (api.get_attr(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng) ==
          CUDNN_STATUS_SUCCESS &&
      api.get_attr(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &id) == CUDNN_STATUS_SUCCESS)
    tag = "eng" + std::to_string(id);
  api.destroy_desc(eng);
  constexpr int kMax = 32;
  std::vector<cudnnBackendDescriptor_t> knobs;
  for (int i = 0; i < kMax; ++i) {
    cudnnBackendDescriptor_t k = nullptr;
    if (api.create_desc(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &k) != CUDNN_STATUS_SUCCESS) break;
    knobs.push_back(k);
  }
  if (api.get_attr(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                   static_cast<int64_t>(knobs.size()), &n, knobs.data()) == CUDNN_STATUS_SUCCESS)
    for (int64_t i = 0; i < std::min<int64_t>(n, static_cast<int64_t>(knobs.size())); ++i) {
      cudnnBackendKnobType_t type{};
      int64_t value = 0, c = 0;
      if (api.get_attr(knobs[static_cast<size_t>(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &c,
                       &type) == CUDNN_STATUS_SUCCESS &&
          api.get_attr(knobs[static_cast<size_t>(i)], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &c,
                       &value) == CUDNN_STATUS_SUCCESS)
        tag += "_k" + std::to_string(static_cast<int>(type)) + "=" + std::to_string(value);
    }
  for (cudnnBackendDescriptor_t k : knobs) api.destroy_desc(k);
  return tag;
}

// Builds the graph, asks the heuristics (mode A, then the fallback list) for engine
// configurations and keeps the first that finalizes into an execution plan.
std::unique_ptr<Plan> build_plan(const Api& api, size_t version, cudnnHandle_t handle, Elem e, const Shape& sh,
                                 bool backward, int64_t alignment) {
  auto p = std::make_unique<Plan>(api);
  p->scale = 1.f / std::sqrt(static_cast<float>(sh.d));
  p->graph = std::make_unique<Graph>(api);
  Graph& g = *p->graph;
  g.set_alignment(alignment);
  g.set_version(version);
  const cudnnDataType_t io = e == Elem::BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  if (backward)
    backward_graph(g, sh, io);
  else
    forward_graph(g, sh, io);
  cudnnBackendDescriptor_t graph = g.graph(handle);
  std::string tried;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    if (!g.ok()) break;
    const char* mode_name = mode == CUDNN_HEUR_MODE_A ? "heuristics mode A" : "the fallback list";
    cudnnBackendDescriptor_t heur = g.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "engine heuristics");
    g.set_desc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, "heuristics graph");
    g.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
    g.done(heur, mode_name);
    if (!g.ok()) break;
    int64_t count = 0;
    cudnnStatus_t st =
        api.get_attr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr);
    if (st != CUDNN_STATUS_SUCCESS) {
      tried += std::string(tried.empty() ? "" : "; ") + mode_name + ": " + api.describe(st);
      continue;
    }
    if (count <= 0) {
      tried += std::string(tried.empty() ? "" : "; ") + mode_name + ": no engine";
      continue;
    }
    std::vector<cudnnBackendDescriptor_t> cfgs;
    for (int64_t i = 0; i < count; ++i) cfgs.push_back(g.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config"));
    if (!g.ok()) break;
    int64_t got = 0;
    st = api.get_attr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfgs.data());
    if (st != CUDNN_STATUS_SUCCESS) {
      tried += std::string(tried.empty() ? "" : "; ") + mode_name + " results: " + api.describe(st);
      continue;
    }
    for (int64_t i = 0; i < got; ++i) {
      cudnnBackendDescriptor_t plan = nullptr;
      if (api.create_desc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS) continue;
      api.set_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
      st = api.set_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
      if (st == CUDNN_STATUS_SUCCESS) st = api.finalize(plan);
      if (st != CUDNN_STATUS_SUCCESS) {
        tried += std::string(tried.empty() ? "" : "; ") + mode_name + " config " + std::to_string(i) + ": " +
                 api.describe(st);
        api.destroy_desc(plan);
        continue;
      }
      int64_t n = 0;
      api.get_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &p->workspace);
      p->plan = plan;
      p->ok = true;
      p->info = engine_tag(api, cfgs[static_cast<size_t>(i)]) + " (" + mode_name + " config " + std::to_string(i) +
                " of " + std::to_string(got) + ", workspace " + std::to_string(p->workspace) +
                " B): " + plan_json(api, plan);
      return p;
    }
  }
  p->why = !g.ok() ? g.error() : "no execution plan: " + (tried.empty() ? std::string("no engine") : tried);
  return p;
}

int64_t alignment_of(std::initializer_list<const void*> ptrs) {
  int64_t a = 16;
  for (const void* p : ptrs) {
    const auto u = reinterpret_cast<uintptr_t>(p);
    while (a > 1 && u % static_cast<uintptr_t>(a) != 0) a /= 2;
  }
  return a;
}

Shape shape_of(const AttentionShape& s) {
  return Shape{s.batch, s.heads, s.kv_heads, s.q_len, s.kv_len, s.head_dim, s.causal};
}

// What cuDNN's graphs here assume of a shape, before asking cuDNN.
bool shape_ok(const AttentionShape& s, std::string* why) {
  std::string w;
  if (s.batch < 1 || s.heads < 1 || s.kv_heads < 1 || s.q_len < 1 || s.kv_len < 1)
    w = "empty attention shape";
  else if (s.heads % s.kv_heads != 0)
    w = "kv_heads must divide heads";
  else if (s.head_dim % 8 != 0 || s.head_dim > 256)
    w = "head_dim must be a multiple of 8, at most 256";
  if (!w.empty() && why) *why = w;
  return w.empty();
}

// The plan for (shape, direction, alignment) on the current GPU, built on first use;
// nullptr with `why` when there is none. `d` is locked by the caller.
Plan* plan_for(const Api& api, Device& d, Elem e, const AttentionShape& s, bool backward, int64_t alignment,
               std::string* why) {
  const PlanKey key{static_cast<int64_t>(e), s.batch,          s.heads,  s.kv_heads, s.q_len, s.kv_len, s.head_dim,
                    s.causal ? 1 : 0,        backward ? 1 : 0, alignment};
  auto& slot = d.plans[key];
  if (!slot) slot = build_plan(api, runtime().load.version, d.handle, e, shape_of(s), backward, alignment);
  if (!slot->ok) {
    if (why) *why = std::string(backward ? "backward" : "forward") + " graph: " + slot->why;
    return nullptr;
  }
  return slot.get();
}

void* workspace(Device& d, cudaStream_t stream, int64_t bytes) {
  if (bytes <= 0) return nullptr;
  auto& ws = d.workspaces[stream];
  if (ws.second < static_cast<size_t>(bytes)) {
    if (ws.first) {
      CS_CUDA(cudaDeviceSynchronize());  // work queued on the old one finishes first
      CS_CUDA(cudaFree(ws.first));
      ws = {nullptr, 0};
    }
    const cudaError_t err = cudaMalloc(&ws.first, static_cast<size_t>(bytes));
    if (err != cudaSuccess)
      throw RealBackendError("cuDNN attention: cannot allocate a " + std::to_string(bytes >> 20) +
                             " MiB workspace: " + cudaGetErrorString(err));
    ws.second = static_cast<size_t>(bytes);
  }
  return ws.first;
}

void execute(const Api& api, Device& d, Plan& p, cudaStream_t stream, const std::vector<int64_t>& uids,
             const std::vector<void*>& ptrs, const char* what) {
  void* ws = workspace(d, stream, p.workspace);
  cudnnBackendDescriptor_t vp = nullptr;
  cudnnStatus_t st = api.create_desc(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
  if (st == CUDNN_STATUS_SUCCESS)
    st = api.set_attr(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()),
                      uids.data());
  if (st == CUDNN_STATUS_SUCCESS)
    st = api.set_attr(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(ptrs.size()),
                      ptrs.data());
  if (st == CUDNN_STATUS_SUCCESS) st = api.set_attr(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  if (st == CUDNN_STATUS_SUCCESS) st = api.finalize(vp);
  if (st == CUDNN_STATUS_SUCCESS) st = api.set_stream(d.handle, stream);
  if (st == CUDNN_STATUS_SUCCESS) st = api.execute(d.handle, p.plan, vp);
  const std::string err = st == CUDNN_STATUS_SUCCESS ? "" : api.describe(st);
  if (vp) api.destroy_desc(vp);
  if (!err.empty()) throw RealBackendError(std::string("cuDNN attention ") + what + ": " + err);
}

}  // namespace

CudnnLoad probe_cudnn_library(const std::string& path) {
  Api api;
  CudnnLoad load;
  if (open_api(path, api, load)) dlclose(api.lib);
  return load;
}

const CudnnLoad& cudnn_library() {
  api_or_why(nullptr);
  return runtime().load;
}

bool cudnn_attention_supported(Elem e, const AttentionShape& s, std::string* why) {
  if (!shape_ok(s, why)) return false;
  const Api* api = api_or_why(why);
  if (!api) return false;
  Device* d = device_or_why(*api, why);
  if (!d) return false;
  std::lock_guard<std::mutex> lock(d->mu);
  const ShapeKey key{static_cast<int64_t>(e), s.batch, s.heads, s.kv_heads, s.q_len, s.kv_len, s.head_dim,
                     s.causal ? 1 : 0};
  auto it = d->supported.find(key);
  if (it == d->supported.end()) {
    std::string w;
    const bool ok = plan_for(*api, *d, e, s, false, 16, &w) && plan_for(*api, *d, e, s, true, 16, &w);
    it = d->supported.emplace(key, std::make_pair(ok, w)).first;
  }
  if (!it->second.first && why) *why = it->second.second;
  return it->second.first;
}

bool cudnn_attention_forward(Elem e, const AttentionShape& s, const void* q, const void* k, const void* v, void* o,
                             float* stats, cudaStream_t stream, std::string* why) {
  if (!shape_ok(s, why)) return false;
  const Api* api = api_or_why(why);
  if (!api) return false;
  Device* d = device_or_why(*api, why);
  if (!d) return false;
  std::lock_guard<std::mutex> lock(d->mu);
  Plan* p = plan_for(*api, *d, e, s, false, alignment_of({q, k, v, o, stats}), why);
  if (!p) return false;
  std::vector<int64_t> uids{kQ, kK, kV, kO, kStats, kScale};
  std::vector<void*> ptrs{const_cast<void*>(q), const_cast<void*>(k), const_cast<void*>(v), o, stats, &p->scale};
  if (s.causal) uids.push_back(kNegInf), ptrs.push_back(&p->neg_inf);
  execute(*api, *d, *p, stream, uids, ptrs, "forward");
  return true;
}

bool cudnn_attention_backward(Elem e, const AttentionShape& s, const void* q, const void* k, const void* v,
                              const void* o, const void* dout, const float* stats, float* rowsum, float* dq_accum,
                              void* dq16, void* dk16, void* dv16, cudaStream_t stream, std::string* why) {
  if (!shape_ok(s, why)) return false;
  const Api* api = api_or_why(why);
  if (!api) return false;
  Device* d = device_or_why(*api, why);
  if (!d) return false;
  std::lock_guard<std::mutex> lock(d->mu);
  Plan* p =
      plan_for(*api, *d, e, s, true, alignment_of({q, k, v, o, dout, stats, rowsum, dq_accum, dq16, dk16, dv16}), why);
  if (!p) return false;
  // Before cuDNN 9.6 the caller zeroes the dQ accumulator; cuDNN does it since.
  if (runtime().load.version < 90600)
    CS_CUDA(cudaMemsetAsync(dq_accum, 0, static_cast<size_t>(s.batch) * s.heads * s.q_len * s.head_dim * sizeof(float),
                            stream));
  const std::vector<int64_t> uids0{kQ, kK, kV, kO, kDO, kStats, kDQ, kDK, kDV, kRowSum, kDQAccum, kScale, kOne};
  std::vector<int64_t> uids = uids0;
  std::vector<void*> ptrs{const_cast<void*>(q),
                          const_cast<void*>(k),
                          const_cast<void*>(v),
                          const_cast<void*>(o),
                          const_cast<void*>(dout),
                          const_cast<float*>(stats),
                          dq16,
                          dk16,
                          dv16,
                          rowsum,
                          dq_accum,
                          &p->scale,
                          &p->one};
  if (s.causal) uids.push_back(kNegInf), ptrs.push_back(&p->neg_inf);
  execute(*api, *d, *p, stream, uids, ptrs, "backward");
  return true;
}

std::string cudnn_attention_plan_info(Elem e, const AttentionShape& s, bool backward) {
  std::string why;
  if (!shape_ok(s, &why)) return why;
  const Api* api = api_or_why(&why);
  if (!api) return why;
  Device* d = device_or_why(*api, &why);
  if (!d) return why;
  std::lock_guard<std::mutex> lock(d->mu);
  Plan* p = plan_for(*api, *d, e, s, backward, 16, &why);
  return p ? p->info : why;
}

std::string cudnn_attention_check_operations(Elem e, const AttentionShape& s, bool backward) {
  std::string why;
  if (!shape_ok(s, &why)) return why;
  const Api* api = api_or_why(&why);
  if (!api) return why;
  Graph g(*api);
  g.set_version(runtime().load.version);
  const cudnnDataType_t io = e == Elem::BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  if (backward)
    backward_graph(g, shape_of(s), io);
  else
    forward_graph(g, shape_of(s), io);
  return g.error();
}

void set_cudnn_graph_variant(unsigned bits) {
  api_or_why(nullptr);
  Runtime& r = runtime();
  std::lock_guard<std::mutex> lock(r.mu);
  g_variant = bits;
  for (auto& [dev, d] : r.devices) {
    std::lock_guard<std::mutex> dl(d->mu);
    d->plans.clear();
    d->supported.clear();
  }
}

#else  // no cuDNN headers at build time: cuDNN is never available

namespace {
const char* kNoHeaders = "built without cuDNN's headers (cudnn_graph.h was not found)";
}

CudnnLoad probe_cudnn_library(const std::string&) { return CudnnLoad{false, kNoHeaders, 0, ""}; }
const CudnnLoad& cudnn_library() {
  static const CudnnLoad l{false, kNoHeaders, 0, ""};
  return l;
}
bool cudnn_attention_supported(Elem, const AttentionShape&, std::string* why) {
  if (why) *why = kNoHeaders;
  return false;
}
bool cudnn_attention_forward(Elem, const AttentionShape&, const void*, const void*, const void*, void*, float*,
                             cudaStream_t, std::string* why) {
  if (why) *why = kNoHeaders;
  return false;
}
bool cudnn_attention_backward(Elem, const AttentionShape&, const void*, const void*, const void*, const void*,
                              const void*, const float*, float*, float*, void*, void*, void*, cudaStream_t,
                              std::string* why) {
  if (why) *why = kNoHeaders;
  return false;
}
std::string cudnn_attention_plan_info(Elem, const AttentionShape&, bool) { return kNoHeaders; }
std::string cudnn_attention_check_operations(Elem, const AttentionShape&, bool) { return kNoHeaders; }
void set_cudnn_graph_variant(unsigned) {}

#endif

std::string attention_backend_name(AttentionBackend b) {
  if (b == AttentionBackend::Own) return "clustersim fused attention (WMMA, tiles of 64)";
  return "cudnn-" + cudnn_library().version_text + " fused flash attention";
}

namespace {

std::string shape_text(const AttentionShape& s) {
  return "b" + std::to_string(s.batch) + " h" + std::to_string(s.heads) + " kv-heads " + std::to_string(s.kv_heads) +
         " q" + std::to_string(s.q_len) + " kv" + std::to_string(s.kv_len) + " d" + std::to_string(s.head_dim) +
         (s.causal ? " causal" : "");
}

[[noreturn]] void forced_fails(const AttentionShape& s, const std::string& why) {
  throw RealBackendError(
      "attention backend cudnn was asked for (CLUSTERSIM_ATTENTION or --attention-backend), but "
      "cuDNN cannot run " +
      shape_text(s) + ": " + why);
}

// A call of a cuDNN shape that cuDNN cannot run (no plan at its pointers' alignment).
[[noreturn]] void call_fails(const AttentionShape& s, const std::string& why) {
  throw RealBackendError("cuDNN runs " + shape_text(s) +
                         " in this run, but cannot run this call of it: " + why +
                         "; the own kernel cannot stand in for one direction alone (its statistics differ)");
}

}  // namespace

AttentionBackend attention_backend_for(Elem e, const AttentionShape& s) {
  const AttentionChoice c = attention_choice();
  if (c == AttentionChoice::Own) return AttentionBackend::Own;
  std::string why;
  if (cudnn_attention_supported(e, s, &why)) return AttentionBackend::Cudnn;
  if (c == AttentionChoice::Cudnn) forced_fails(s, why);
  return AttentionBackend::Own;
}

AttentionBackend run_attention_forward(Elem e, const AttentionShape& s, const void* q, const void* k, const void* v,
                                       void* o, float* lse, cudaStream_t stream) {
  if (attention_backend_for(e, s) == AttentionBackend::Cudnn) {
    // The shape is cuDNN's in both directions: a call that cuDNN cannot run (pointers
    // it has no plan for) must not fall back alone, or its backward would read statistics
    // in the other kernel's form.
    std::string why;
    if (cudnn_attention_forward(e, s, q, k, v, o, lse, stream, &why)) return AttentionBackend::Cudnn;
    call_fails(s, why);
  }
  attention_forward(e, s, q, k, v, o, lse, stream);
  return AttentionBackend::Own;
}

AttentionBackend run_attention_backward(Elem e, const AttentionShape& s, const void* q, const void* k, const void* v,
                                        const void* o, const void* dout, const float* lse, float* delta, float* dq,
                                        float* dk, float* dv, void* dq16, void* dk16, void* dv16, cudaStream_t stream) {
  if (attention_backend_for(e, s) == AttentionBackend::Cudnn) {
    std::string why;
    if (cudnn_attention_backward(e, s, q, k, v, o, dout, lse, delta, dq, dq16, dk16, dv16, stream, &why))
      return AttentionBackend::Cudnn;
    call_fails(s, why);  // as in the forward: no fallback of one direction alone
  }
  attention_backward(e, s, q, k, v, o, dout, lse, delta, dq, dk, dv, dq16, dk16, dv16, stream);
  return AttentionBackend::Own;
}

}  // namespace clustersim::real
