// cuDNN's graph API as the fused attention uses it (real_backend/cudnn_attention.cc): the
// entry points resolved from the library at run time, and the forward and backward SDPA
// operation graphs built on its backend descriptors, as cudnn-frontend builds them.
// Compiled only with cuDNN's headers (CLUSTERSIM_HAVE_CUDNN_HEADERS).
#pragma once

#include <cudnn_graph.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "real_backend/cudnn_attention.h"

namespace clustersim::real::cudnn {

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

std::string version_text(size_t v);  // 91900 -> "9.19.0"
// Opens the library and resolves every entry point; false with `load.reason` when it cannot.
bool open_api(const std::string& path, Api& api, CudnnLoad& load);

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

// The forward: O and the softmax statistics from Q, K, V (cudnn-frontend's SDPA forward).
void forward_graph(Graph& g, const Shape& sh, cudnnDataType_t io);
// dQ, dK, dV from dO, with the forward's statistics: cudnn-frontend's SDPA backward. Bit 0 of
// `variant` (CLUSTERSIM_CUDNN_VARIANT, for diagnosis) reads K back for dQ in the i/o type
// instead of FP32.
void backward_graph(Graph& g, const Shape& sh, cudnnDataType_t io, unsigned variant);

}  // namespace clustersim::real::cudnn
