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
#include "real_backend/cudnn_graph.h"
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

using namespace cudnn;  // the graph API and its tensor uids (real_backend/cudnn_graph.h)

// Graph variants for diagnosis (CLUSTERSIM_CUDNN_VARIANT): bit 0 reads K back (for dQ)
// in the i/o type instead of fp32.
unsigned g_variant = 0;

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
    backward_graph(g, sh, io, g_variant);
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
    backward_graph(g, shape_of(s), io, g_variant);
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
