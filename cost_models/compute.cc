#include "cost_models/compute.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numbers>
#include <tuple>
#include <utility>
#include <vector>

#include "cost_models/power_cap.h"

namespace clustersim {
namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

double gemm_wave_efficiency(const Op& op, const GpuSpec& gpu, const ComputeProfile& p) {
  if (gpu.sm_count <= 0) return 1.0;
  const int64_t tiles = ceil_div(op.m, p.gemm_tile_m) * ceil_div(op.n, p.gemm_tile_n) * std::max<int64_t>(1, op.batch);
  const int64_t waves = ceil_div(tiles, gpu.sm_count);
  return static_cast<double>(tiles) / static_cast<double>(waves * gpu.sm_count);
}

namespace {

double roofline(const Op& op, const GpuSpec& gpu, double math_eff, double mem_eff, double wave) {
  const double bytes = static_cast<double>(op.bytes_read + op.bytes_written);
  const double peak = op.kind == OpKind::Memory ? gpu.peak_fp32 : gpu.peak_flops(op.dtype);
  return std::max(op.flops / (peak * math_eff * wave), bytes / (gpu.hbm_bandwidth * mem_eff));
}

// Piecewise linear in log x over sorted (x, y) pairs (y in log space too when `log_y`).
double interpolate(const std::vector<std::pair<double, double>>& xy, double x) {
  if (xy.empty()) return -1;
  if (x <= xy.front().first) return xy.front().second;
  if (x >= xy.back().first) return xy.back().second;
  for (size_t i = 1; i < xy.size(); ++i)
    if (x <= xy[i].first) {
      const double t = (std::log(x) - std::log(xy[i - 1].first)) / (std::log(xy[i].first) - std::log(xy[i - 1].first));
      return xy[i - 1].second + t * (xy[i].second - xy[i - 1].second);
    }
  return xy.back().second;
}

}  // namespace

struct MeasuredIndex {
  virtual ~MeasuredIndex() = default;
};

namespace {

// The index `key` of `t`, built by `build` the first time it is asked for.
template <typename T, typename Build>
std::shared_ptr<const T> index_of(const MeasuredTables& t, const std::string& key, Build build) {
  {
    std::lock_guard<std::mutex> lock(t.index_mu);
    auto it = t.index.find(key);
    if (it != t.index.end()) return std::static_pointer_cast<const T>(it->second);
  }
  std::shared_ptr<const T> made = build();
  std::lock_guard<std::mutex> lock(t.index_mu);
  auto [it, inserted] = t.index.emplace(key, made);
  return std::static_pointer_cast<const T>(it->second);
}

std::string gpu_key(const GpuSpec& gpu, DType d) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s|%.17g|%.17g|%d", gpu.name.c_str(), gpu.peak_flops(d), gpu.hbm_bandwidth,
                static_cast<int>(d));
  return buf;
}

// Sorted unique values.
std::vector<double> axis(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}
size_t position(const std::vector<double>& ax, double x) {
  return static_cast<size_t>(std::lower_bound(ax.begin(), ax.end(), x) - ax.begin());
}

// The grid values of a sorted unique axis that bracket x, and the fraction of the way
// from lo to hi in log space; clamped to the axis's ends (t = 0).
void bracket_sorted(const std::vector<double>& v, double x, double& lo, double& hi, double& t) {
  t = 0;
  if (x <= v.front()) {
    lo = hi = v.front();
    return;
  }
  if (x >= v.back()) {
    lo = hi = v.back();
    return;
  }
  auto it = std::upper_bound(v.begin(), v.end(), x);
  hi = *it;
  lo = *(it - 1);
  t = (std::log(x) - std::log(lo)) / (std::log(hi) - std::log(lo));
}

struct GemmIndex : MeasuredIndex {
  std::vector<double> am, an, ak;
  std::vector<double> grid;  // [(i_m * |an| + i_n) * |ak| + i_k]: log ratio, NaN where not measured
  struct Point {
    double lm, ln, lk, ratio;
  };
  std::vector<Point> points;  // in table order
  double at(double m, double n, double k) const {
    return grid[(position(am, m) * an.size() + position(an, n)) * ak.size() + position(ak, k)];
  }
};

double gemm_measured(const Op& op, const GpuSpec& gpu, const MeasuredTables& tables) {
  // Ratio of measured to ideal (the roofline at efficiency 1) at the grid points around
  // the shape in log2(m, n, k). The ideal leaves out wave quantization: the library picks
  // its tile (and split) per shape, so a fixed tile's waves would put steps into the
  // ratio that the measured times do not have. Held out on the H200 grid (each interior
  // point from its two neighbours along an axis), that halves the p95 error.
  const int64_t e = std::max<int64_t>(1, op.bytes_read / std::max<int64_t>(1, (op.m * op.k + op.k * op.n) * op.batch));
  const auto ix = index_of<GemmIndex>(tables, "gemm|" + std::to_string(e) + "|" + gpu_key(gpu, op.dtype), [&] {
    auto g = std::make_shared<GemmIndex>();
    std::vector<double> am, an, ak;
    for (const GemmPoint& p : tables.gemm) {
      if (p.dtype != op.dtype) continue;
      Op probe = op;
      probe.m = p.m;
      probe.n = p.n;
      probe.k = p.k;
      probe.batch = 1;
      probe.flops = 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
      probe.bytes_read = (p.m * p.k + p.k * p.n) * e;
      probe.bytes_written = p.m * p.n * e;
      const double ideal = roofline(probe, gpu, 1.0, 1.0, 1.0);
      g->points.push_back({std::log2(static_cast<double>(p.m)), std::log2(static_cast<double>(p.n)),
                           std::log2(static_cast<double>(p.k)), std::log(p.seconds / ideal)});
      am.push_back(static_cast<double>(p.m));
      an.push_back(static_cast<double>(p.n));
      ak.push_back(static_cast<double>(p.k));
    }
    if (g->points.empty()) return std::shared_ptr<const GemmIndex>(g);
    g->am = axis(am), g->an = axis(an), g->ak = axis(ak);
    g->grid.assign(g->am.size() * g->an.size() * g->ak.size(), std::numeric_limits<double>::quiet_NaN());
    size_t i = 0;
    for (const GemmPoint& p : tables.gemm) {
      if (p.dtype != op.dtype) continue;
      g->grid[(position(g->am, static_cast<double>(p.m)) * g->an.size() + position(g->an, static_cast<double>(p.n))) *
                  g->ak.size() +
              position(g->ak, static_cast<double>(p.k))] = g->points[i++].ratio;  // the last row of a shape wins
    }
    return std::shared_ptr<const GemmIndex>(g);
  });
  if (ix->points.empty()) return -1;
  // A batched GEMM (one strided-batched or grouped launch: the unfused attention's
  // per-head products, MoE's experts) runs its batch's tiles together, as one GEMM of
  // batch × m rows and the same depth would: it is looked up there, not as one member of
  // the batch alone (which would leave most of the SMs idle), and scaled by its own roofline.
  const double rows = static_cast<double>(op.m) * static_cast<double>(std::max<int64_t>(1, op.batch));
  // On a regular grid: trilinear interpolation of the log ratio between the 8 corners
  // that enclose the shape (clamped at the grid's edges).
  {
    double m0, m1, tm, n0, n1, tn, k0, k1, tk;
    bracket_sorted(ix->am, rows, m0, m1, tm);
    bracket_sorted(ix->an, static_cast<double>(op.n), n0, n1, tn);
    bracket_sorted(ix->ak, static_cast<double>(op.k), k0, k1, tk);
    double acc = 0;
    bool complete = true;
    for (int c = 0; c < 8 && complete; ++c) {
      const double w = (c & 1 ? tm : 1 - tm) * (c & 2 ? tn : 1 - tn) * (c & 4 ? tk : 1 - tk);
      const double r = ix->at(c & 1 ? m1 : m0, c & 2 ? n1 : n0, c & 4 ? k1 : k0);
      if (std::isnan(r)) {
        complete = w == 0.0;
        continue;
      }
      acc += w * r;
    }
    if (complete) return std::exp(acc) * roofline(op, gpu, 1.0, 1.0, 1.0);
  }
  // Off the grid: inverse-square-distance weights over the 8 nearest points.
  const double lm = std::log2(rows), ln = std::log2(static_cast<double>(op.n)),
               lk = std::log2(static_cast<double>(op.k));
  std::vector<std::pair<double, double>> near;  // (distance², log ratio)
  near.reserve(ix->points.size());
  for (const GemmIndex::Point& p : ix->points) {
    const double dm = p.lm - lm, dn = p.ln - ln, dk = p.lk - lk;
    near.emplace_back(dm * dm + dn * dn + dk * dk, p.ratio);
  }
  std::sort(near.begin(), near.end());
  if (near.size() > 8) near.resize(8);
  if (near[0].first < 1e-12) return std::exp(near[0].second) * roofline(op, gpu, 1.0, 1.0, 1.0);
  double wsum = 0, acc = 0;
  for (auto [d2, lr] : near) {
    const double w = 1.0 / (d2 * d2);
    wsum += w;
    acc += w * lr;
  }
  return std::exp(acc / wsum) * roofline(op, gpu, 1.0, 1.0, 1.0);
}

struct AttentionIndex : MeasuredIndex {
  std::vector<double> groups, seqs, bhs;
  std::vector<double> grid;  // [(i_group * |seqs| + i_seq) * |bhs| + i_bh]: log ratio, NaN where not measured
};

double attention_measured(const Op& op, const GpuSpec& gpu, const MeasuredTables& tables) {
  // log(measured / (FLOPs / peak)) on the measured grid of (length, batch × heads) for
  // each GQA group size; bilinear in (log length, log batch × heads) inside the group
  // sizes around the op's, then linear in log group size between them (clamped at the
  // grid's edges). Batch × heads matters: the kernel's thread blocks are batch × heads ×
  // query tiles, and how they fill the SMs' waves moves the rate by ±20 %.
  const bool bwd = backward_kernel(op);
  const std::string key = std::string("attention|") + (bwd ? "b|" : "f|") + std::to_string(op.head_dim) +
                          (op.causal ? "|c|" : "|n|") + gpu_key(gpu, op.dtype);
  const auto ix = index_of<AttentionIndex>(tables, key, [&] {
    auto a = std::make_shared<AttentionIndex>();
    std::vector<double> groups, seqs, bhs, ratios;
    std::vector<std::tuple<double, double, double>> where;
    for (const AttentionPoint& p : tables.attention) {
      if (p.backward != bwd || p.head_dim != op.head_dim || p.causal != op.causal) continue;
      Op probe;
      probe.batch = p.batch_heads;
      probe.heads = 1;
      probe.q_len = probe.kv_len = p.seq;
      probe.head_dim = p.head_dim;
      probe.causal = p.causal;
      const double flops = attention_flops(probe) * (bwd ? 2.5 : 1.0);
      ratios.push_back(std::log(p.seconds / (flops / gpu.peak_flops(op.dtype))));
      where.emplace_back(static_cast<double>(p.group), static_cast<double>(p.seq), static_cast<double>(p.batch_heads));
      groups.push_back(static_cast<double>(p.group));
      seqs.push_back(static_cast<double>(p.seq));
      bhs.push_back(static_cast<double>(p.batch_heads));
    }
    if (ratios.empty()) return std::shared_ptr<const AttentionIndex>(a);
    a->groups = axis(groups), a->seqs = axis(seqs), a->bhs = axis(bhs);
    a->grid.assign(a->groups.size() * a->seqs.size() * a->bhs.size(), std::numeric_limits<double>::quiet_NaN());
    for (size_t i = 0; i < ratios.size(); ++i) {
      const auto [g, s, b] = where[i];
      a->grid[(position(a->groups, g) * a->seqs.size() + position(a->seqs, s)) * a->bhs.size() + position(a->bhs, b)] =
          ratios[i];
    }
    return std::shared_ptr<const AttentionIndex>(a);
  });
  if (ix->grid.empty()) return -1;
  const double seq = std::sqrt(static_cast<double>(op.q_len) * static_cast<double>(op.kv_len));
  const double bh = static_cast<double>(std::max<int64_t>(1, op.batch) * std::max<int64_t>(1, op.heads));
  const double group = static_cast<double>(std::max<int64_t>(1, op.heads / std::max<int64_t>(1, op.kv_heads)));
  double g0, g1, tg, s0, s1, ts, b0, b1, tb;
  bracket_sorted(ix->groups, group, g0, g1, tg);
  bracket_sorted(ix->seqs, seq, s0, s1, ts);
  bracket_sorted(ix->bhs, bh, b0, b1, tb);
  double acc = 0;
  for (int c = 0; c < 8; ++c) {
    const double w = (c & 1 ? tg : 1 - tg) * (c & 2 ? ts : 1 - ts) * (c & 4 ? tb : 1 - tb);
    if (w == 0) continue;
    const double r = ix->grid[(position(ix->groups, c & 1 ? g1 : g0) * ix->seqs.size() +
                               position(ix->seqs, c & 2 ? s1 : s0)) *
                                  ix->bhs.size() +
                              position(ix->bhs, c & 4 ? b1 : b0)];
    if (std::isnan(r)) return -1;  // not a grid: leave it to the model
    acc += w * r;
  }
  return std::exp(acc) * op.flops / gpu.peak_flops(op.dtype);
}

struct MemoryIndex : MeasuredIndex {
  std::vector<long long> shares;                                // measured read shares, in thousandths
  std::vector<std::vector<std::pair<double, double>>> curves;  // per share: (bytes, log seconds per byte), sorted
};

double memory_measured(const Op& op, const MeasuredTables& tables) {
  if (tables.memory.empty()) return -1;
  // Measured shares in thousandths (a hand-written 0.333 and a computed 1/3 are one).
  auto bin = [](double s) { return std::llround(s * 1000); };
  const auto ix = index_of<MemoryIndex>(tables, "memory", [&] {
    auto m = std::make_shared<MemoryIndex>();
    for (const MemoryPoint& p : tables.memory) m->shares.push_back(bin(p.read_share));
    std::sort(m->shares.begin(), m->shares.end());
    m->shares.erase(std::unique(m->shares.begin(), m->shares.end()), m->shares.end());
    m->curves.resize(m->shares.size());
    for (const MemoryPoint& p : tables.memory) {
      const size_t i = static_cast<size_t>(std::lower_bound(m->shares.begin(), m->shares.end(), bin(p.read_share)) -
                                           m->shares.begin());
      m->curves[i].emplace_back(p.bytes, std::log(p.seconds / p.bytes));
    }
    for (auto& c : m->curves) std::sort(c.begin(), c.end());
    return std::shared_ptr<const MemoryIndex>(m);
  });
  const double bytes = static_cast<double>(op.bytes_read + op.bytes_written);
  const double share = bytes > 0 ? static_cast<double>(op.bytes_read) / bytes : 0.5;
  // Seconds per byte (log-log) along bytes at one measured share: past the largest
  // measurement the bandwidth stays that of the largest, so time keeps growing with bytes.
  auto along_bytes = [&](size_t i) { return interpolate(ix->curves[i], bytes); };
  // Then linear in the read share between the two measured shares around the op's (the
  // nearest one outside the measured range).
  const double want = share * 1000;
  auto hi = std::lower_bound(ix->shares.begin(), ix->shares.end(), want,
                             [](long long s, double w) { return static_cast<double>(s) < w; });
  const size_t h = static_cast<size_t>(hi - ix->shares.begin());
  if (hi == ix->shares.end()) return std::exp(along_bytes(ix->shares.size() - 1)) * bytes;
  if (hi == ix->shares.begin() || static_cast<double>(*hi) == want) return std::exp(along_bytes(h)) * bytes;
  const long long lo = *(hi - 1);
  const double t = (want - static_cast<double>(lo)) / static_cast<double>(*hi - lo);
  return std::exp((1 - t) * along_bytes(h - 1) + t * along_bytes(h)) * bytes;
}

// Each op shape's measured-table time, once: ops repeat their shapes across layers and
// micro-batches, and serving iterations repeat theirs across steps.
double measured_seconds(const Op& op, const GpuSpec& gpu, const MeasuredTables& tables) {
  struct Key {
    int64_t v[14];
    double flops, peak, hbm;
  } k{};
  k.v[0] = static_cast<int64_t>(op.kind);
  k.v[1] = static_cast<int64_t>(op.dtype);
  k.v[2] = static_cast<int64_t>(backward_kernel(op));
  k.v[3] = op.m, k.v[4] = op.n, k.v[5] = op.k, k.v[6] = op.batch;
  k.v[7] = op.heads, k.v[8] = op.kv_heads, k.v[9] = op.q_len, k.v[10] = op.kv_len, k.v[11] = op.head_dim;
  k.v[12] = op.bytes_read * 2 + static_cast<int64_t>(op.causal);
  k.v[13] = op.bytes_written;
  k.flops = op.flops, k.peak = gpu.peak_flops(op.dtype), k.hbm = gpu.hbm_bandwidth;
  const std::string key(reinterpret_cast<const char*>(&k), sizeof k);
  {
    std::lock_guard<std::mutex> lock(tables.index_mu);
    auto it = tables.memo.find(key);
    if (it != tables.memo.end()) return it->second;
  }
  double t = -1;
  if (op.kind == OpKind::Gemm)
    t = gemm_measured(op, gpu, tables);
  else if (op.kind == OpKind::Attention)
    t = attention_measured(op, gpu, tables);
  else if (op.kind == OpKind::Memory)
    t = memory_measured(op, tables);
  std::lock_guard<std::mutex> lock(tables.index_mu);
  if (tables.memo.size() < (size_t{1} << 20)) tables.memo.emplace(key, t);
  return t;
}

}  // namespace

namespace {
double compute_seconds_streaming(const Op& op, const GpuSpec& gpu, const ComputeProfile& p);
}

double attention_dropout_scores(const Op& op) {
  return static_cast<double>(std::max<int64_t>(1, op.batch) * std::max<int64_t>(1, op.heads)) *
         static_cast<double>(op.q_len) * static_cast<double>(op.kv_len) * (op.causal ? 0.5 : 1.0);
}

double attention_dropout_seconds(const Op& op, const GpuSpec& gpu, const ComputeProfile& p) {
  if (op.kind != OpKind::Attention || !op.dropout || gpu.alu_slot_rate() <= 0) return 0;
  const size_t pass = backward_kernel(op) ? 1 : 0;
  return attention_dropout_scores(op) * (p.flash2 ? p.flash2_dropout_ops[pass] : p.attention_dropout_ops[pass]) /
         gpu.alu_slot_rate();
}

namespace {
// With fewer K/V heads than query heads (GQA), the backward's main kernel writes dK and dV
// for every query head, and a kernel each sums a group's partials into the K/V head's
// gradient (cuDNN's fmha_reduce_head): the 16-bit partials read (query heads x kv_len x d)
// and the gradient written (K/V heads x kv_len x d), for dK and for dV.
bool gqa_backward(const Op& op) {
  return op.kind == OpKind::Attention && backward_kernel(op) && op.kv_heads > 0 && op.kv_heads < op.heads;
}
double gqa_reduce_bytes(const Op& op) {
  if (!gqa_backward(op)) return 0;
  return 2.0 * 2.0 * static_cast<double>(std::max<int64_t>(1, op.batch) * (op.heads + op.kv_heads)) *
         static_cast<double>(std::max<int64_t>(1, op.kv_len)) * static_cast<double>(op.head_dim);
}
}  // namespace

double attention_backward_aux_bytes(const Op& op) {
  if (op.kind != OpKind::Attention || !backward_kernel(op)) return 0;
  return (8.0 + 6.0) * static_cast<double>(std::max<int64_t>(1, op.batch) * std::max<int64_t>(1, op.heads)) *
             static_cast<double>(op.q_len) * static_cast<double>(op.head_dim) +
         gqa_reduce_bytes(op);
}
namespace {
// How many small kernels run beside the backward's main one: two, four with GQA.
int attention_backward_aux_kernels(const Op& op) { return gqa_backward(op) ? 4 : 2; }
}  // namespace

double attention_aux_in_op(const Op& op, const GpuSpec& gpu, const ComputeProfile& p) {
  if (attention_backward_aux_bytes(op) <= 0 || (p.measured && measured_seconds(op, gpu, *p.measured) >= 0)) return 0;
  return attention_backward_aux_seconds(op, gpu, p);
}

double attention_backward_aux_seconds(const Op& op, const GpuSpec& gpu, const ComputeProfile& p) {
  const double bytes = attention_backward_aux_bytes(op);
  if (bytes <= 0 || gpu.hbm_bandwidth <= 0) return 0;
  return attention_backward_aux_kernels(op) * (p.kernel_latency_s + p.launch_overhead_s) +
         bytes / (gpu.hbm_bandwidth * p.memory_efficiency);
}

namespace {
// Issue slots an element a memory op of this class spends beyond its stream (0: none).
double slots_per_element(MemAccess a, const ComputeProfile& p) {
  switch (a) {
    case MemAccess::Streaming:
    case MemAccess::Fp8CastTranspose:  // its bytes, streamed (a calibration measures the kernel itself)
    case MemAccess::MultiTensor:       // slots a byte: multi_tensor_ops_per_byte
    case MemAccess::BroadcastLoop:     // slots or stream, the longer: broadcast_loop_ops_per_element
    case MemAccess::HostSync:          // a time: host_sync_s
    case MemAccess::CudaCoreDecode:    // its math: cuda_core_decode_seconds
      return 0;
    case MemAccess::DynamicCast:
      return p.dynamic_cast_ops_per_element;
    case MemAccess::RandomMask:
      return p.dropout_rng_ops_per_element;
    case MemAccess::Scatter:
      return p.scatter_ops_per_element;
    case MemAccess::IndexPut:
      return p.index_put_ops_per_element;
    case MemAccess::MixedSoftmax:
      return p.mixed_softmax_ops_per_element;
    case MemAccess::StridedCopy:
      return p.strided_copy_ops_per_element;
    case MemAccess::CatCopy:
      return p.cat_copy_ops_per_element;
    case MemAccess::TanhGelu:
      return p.tanh_gelu_ops_per_element;
  }
  return 0;
}
}  // namespace

double cuda_core_decode_seconds(const Op& op, const GpuSpec& gpu, const ComputeProfile& p) {
  if (op.access != MemAccess::CudaCoreDecode || gpu.sm_count <= 0 || gpu.sm_clock_hz <= 0 || op.kv_len <= 0) return 0;
  const double sms = static_cast<double>(gpu.sm_count), clock = gpu.sm_clock_hz;
  const double per_block = static_cast<double>(std::max<int64_t>(1, op.k));
  // SM cycles an element (one query head, one cached token, one dimension): the two FMAs of
  // QKᵀ and PV at the SM's FP32 lanes (128 FP32 operations a cycle on Hopper and Blackwell,
  // 64 x 2 on Ampere), the rest at its 256 issue slots, the K/V handling shared by the
  // block's query heads.
  const double fp32_per_cycle = gpu.peak_fp32 / (sms * clock);
  const double cycles = p.decode_fma_ops / fp32_per_cycle +
                        (p.decode_head_slots + p.decode_kv_slots / per_block) / 256.0;
  const double hd = static_cast<double>(std::max<int64_t>(1, op.head_dim));
  const double all = static_cast<double>(op.kv_len) * static_cast<double>(op.heads) * hd * cycles / (sms * clock);
  const double longest = static_cast<double>(op.q_len) * per_block * hd * cycles / (p.decode_block_sm_share * clock);
  return p.decode_kernel_latency_s + std::max(all, longest);
}

double compute_seconds(const Op& op, const GpuSpec& gpu, const ComputeProfile& p) {
  if (op.fixed_seconds > 0) return op.fixed_seconds;
  // op.m host waits, then op.n backwards launched from an empty queue, each walking op.batch
  // autograd nodes before its first kernel, and op.k small ops the host dispatches one by one.
  if (op.kind == OpKind::Memory && op.access == MemAccess::HostSync)
    return static_cast<double>(op.m) * p.host_sync_s +
           static_cast<double>(op.n) *
               (p.backward_relaunch_s + static_cast<double>(std::max<int64_t>(op.batch, 0)) * p.autograd_node_s) +
           static_cast<double>(op.k) * p.host_op_s;
  const double t = compute_seconds_streaming(op, gpu, p);
  if (op.kind == OpKind::Attention) {
    if (t <= 0) return t;
    return t * (p.triton_attention ? p.triton_attention_factor : 1.0) + attention_dropout_seconds(op, gpu, p) +
           attention_aux_in_op(op, gpu, p);
  }
  if (op.kind != OpKind::Memory || t == 0) return t;
  if (op.access == MemAccess::MultiTensor) {
    if (p.multi_tensor_efficiency > 0) return t / p.multi_tensor_efficiency;
    return t + static_cast<double>(op.bytes_read + op.bytes_written) * p.multi_tensor_ops_per_byte / gpu.alu_slot_rate();
  }
  if (op.access == MemAccess::BroadcastLoop) {
    // op.m elements walked by broadcast passes over FP32 (4 bytes read, 4 written each): the
    // longer of their issue slots and their stream, over the op's streamed time.
    const double m = static_cast<double>(op.m);
    const double excess = m * p.broadcast_loop_ops_per_element / gpu.alu_slot_rate() -
                          8.0 * m / (gpu.hbm_bandwidth * p.memory_efficiency);
    return t + std::max(0.0, excess);
  }
  if (op.access == MemAccess::CudaCoreDecode) return std::max(t, cuda_core_decode_seconds(op, gpu, p));
  const double slots = slots_per_element(op.access, p);
  // A memory op that stands for k small kernels launched back to back (k > 1) pays each
  // further kernel's floor and launch gap.
  const int64_t k = memory_kernels(op);
  const double more = k > 1 ? static_cast<double>(k - 1) * (p.kernel_latency_s + p.launch_overhead_s) : 0;
  return (slots > 0 ? t + static_cast<double>(op.m) * slots / gpu.alu_slot_rate() : t) + more;
}

int timed_kernel_count(const Op& op, const GpuSpec& gpu, const ComputeProfile& p) {
  if (op.fixed_seconds > 0) return 0;
  switch (op.kind) {
    case OpKind::Gemm:
      return 1;
    case OpKind::Attention:
      return attention_aux_in_op(op, gpu, p) > 0 ? 1 + attention_backward_aux_kernels(op) : 1;
    case OpKind::Memory:
      return static_cast<int>(std::min<int64_t>(memory_kernels(op), 1 << 20));
    default:
      return 0;
  }
}

double queued_seconds(const Op& op, double seconds, double gap_s, const GpuSpec& gpu, const ComputeProfile& p) {
  if (seconds <= 0) return seconds;
  const int n = timed_kernel_count(op, gpu, p);
  if (n == 0) return seconds;
  const double total = std::max(n * p.queue_interval_s, seconds + gap_s - n * p.queue_saving_s);
  return std::max(1e-12, total - gap_s);
}

namespace {
double compute_seconds_streaming(const Op& op, const GpuSpec& gpu, const ComputeProfile& p) {
  const double bytes = static_cast<double>(op.bytes_read + op.bytes_written);
  // An op with nothing to read, write or compute only joins dependencies: no kernel.
  if (op.kind == OpKind::Memory && bytes == 0 && op.flops == 0) return 0;
  if (p.measured && op.kind != OpKind::Collective && op.kind != OpKind::Send && op.kind != OpKind::Recv) {
    const double t = measured_seconds(op, gpu, *p.measured);
    if (t >= 0) return t;
  }
  // Uncalibrated: a kernel's floor plus the longer of its math and its memory time.
  const double mem = bytes / (gpu.hbm_bandwidth * p.memory_efficiency);
  switch (op.kind) {
    case OpKind::Gemm:
      return gemm_default_seconds(op, gpu, p);
    case OpKind::Attention: {
      // Fused attention: query tiles of 128 rows walk the keys; short sequences spend
      // more of each tile in its prologue and epilogue (and, causal, in its ragged
      // diagonal), so the rate rises as L / (L + L½); and the SMs finish their last,
      // uneven tiles at different times, so with n tiles per SM the rate is n / (n + tail)
      // of the plateau. Head dim 64 moves half the bytes per FLOP of 128 through the same
      // pipeline at a lower rate ((d/128)^x, x per pass). The backward's main kernel runs its 2.5x FLOPs
      // at attention_backward_factor of the forward's plateau (its two small kernels:
      // attention_backward_aux_seconds). Sources: docs/model.md.
      const double seq = std::sqrt(static_cast<double>(op.q_len) * static_cast<double>(op.kv_len));
      const bool fa2_on_hopper = p.flash2 && gpu.peak_fp8 > 0;  // Hopper and later have FP8 tensor cores
      const size_t pass = backward_kernel(op) ? 1 : 0;
      const double tiles = static_cast<double>(std::max<int64_t>(1, op.batch) * std::max<int64_t>(1, op.heads)) *
                           std::ceil(static_cast<double>(std::max<int64_t>(1, op.q_len)) / 128.0);
      const double n = tiles / static_cast<double>(std::max(1, gpu.sm_count));
      const double tail = fa2_on_hopper && pass == 0 ? p.flash2_tail_tiles : p.attention_tail_tiles[pass];
      double eff = (fa2_on_hopper ? p.flash2_hopper_efficiency : p.attention_efficiency) * seq /
                   (seq + p.attention_seq_half[pass]) * n / (n + tail);
      // The Triton kernel runs head dim 64 at 128's rate (docs/model.md, "FlashAttention in Triton").
      if (op.head_dim > 0 && op.head_dim < 128 && !p.triton_attention)
        eff *= std::pow(static_cast<double>(op.head_dim) / 128.0,
                        p.flash2 ? p.flash2_head_dim_exponent : p.attention_head_dim_exponent[pass]);
      // cuDNN's Hopper-class kernel (the fit's); FlashAttention-2's, which pre-Hopper GPUs run
      // for either setting, keeps its tile fit.
      if (pass == 1) eff *= !p.flash2 && gpu.peak_fp8 > 0 ? p.attention_backward_factor : p.flash2_backward_factor;
      if (op.dtype == DType::FP8 && gpu.peak_fp8 > 0) eff *= p.fp8_attention_efficiency;
      // Past one tile the last, partial one is run whole: its rows are padded to 128, so the
      // work is the FLOPs of ⌈L_q / 128⌉ whole tiles (a query one row past a tile boundary
      // had come out faster, its extra tile raising n and barely the FLOPs).
      const double padded =
          op.q_len > 128 ? static_cast<double>(ceil_div(op.q_len, int64_t{128}) * 128) / static_cast<double>(op.q_len)
                         : 1.0;
      return p.kernel_latency_s + std::max(op.flops * padded / (gpu.peak_flops(op.dtype) * eff), mem);
    }
    case OpKind::Memory:
      return p.kernel_latency_s + std::max(op.flops / gpu.peak_fp32, mem);
    case OpKind::Collective:
    case OpKind::Send:
    case OpKind::Recv:
      return 0;
  }
  return 0;
}

// The SMs' share: N / (N − blocks × span), the SMs lost never all of them.
double sm_share(const GpuSpec& gpu, int blocks, int64_t span) {
  const int64_t lost = std::min<int64_t>(gpu.sm_count - 1, int64_t{blocks} * span);
  return static_cast<double>(gpu.sm_count) / static_cast<double>(gpu.sm_count - lost);
}

// A GEMM of 2-SM clusters at measured steps up to their last, and past it the SMs' share
// with its excess over 1 scaled to meet the last step: the measured factors sit below the
// share (1.45 where it gives 1.94 at 32 blocks), and the share alone would jump there.
template <size_t K>
double cluster_steps(const GpuSpec& gpu, int blocks, const std::array<std::pair<int, double>, K>& steps) {
  for (const auto& [upto, factor] : steps)
    if (blocks <= upto) return factor;
  const auto [last, measured] = steps.back();
  const int64_t span = gpu.gemm_cluster_sms;
  return 1.0 + (sm_share(gpu, blocks, span) - 1.0) * (measured - 1.0) / (sm_share(gpu, last, span) - 1.0);
}
}  // namespace

double beside_blocks(OpKind kind, const GpuSpec& gpu, int blocks) {
  if (kind == OpKind::Memory || blocks <= 0 || gpu.sm_count <= 1) return 1.0;
  if (kind == OpKind::Gemm && gpu.gemm_cluster_sms >= 2) {
    // Measured steps (H200, copy blocks beside cuBLASLt BF16 GEMMs planned for every SM).
    constexpr std::array<std::pair<int, double>, 4> kSteps{{{2, 1.077}, {8, 1.145}, {24, 1.29}, {32, 1.45}}};
    return cluster_steps(gpu, blocks, kSteps);
  }
  return sm_share(gpu, blocks, 1);
}

size_t overlap_kind_index(OpKind kind) { return kind == OpKind::Gemm ? 0 : kind == OpKind::Attention ? 1 : 2; }

double beside_collective(OpKind kind, const GpuSpec& gpu, const ComputeProfile& profile) {
  const double measured = profile.overlap_slowdown[1][overlap_kind_index(kind)];
  return measured > 0 ? measured : beside_blocks(kind, gpu, profile.nccl_channels);
}

double beside_p2p(OpKind kind, const GpuSpec& gpu, const ComputeProfile& profile, bool network_peer) {
  const double measured = profile.overlap_slowdown[0][overlap_kind_index(kind)];
  if (measured > 0) return measured;
  return beside_blocks(kind, gpu, network_peer ? profile.nccl_net_peer_channels : profile.nccl_channels);
}

double beside_userbuffers(OpKind kind, const GpuSpec& gpu, const ComputeProfile& profile, int held_sms,
                          bool sm_margin) {
  const double measured = profile.overlap_slowdown[2][overlap_kind_index(kind)];
  if (measured > 0) return measured;
  const int blocks = held_sms > 0 ? held_sms : 16;
  if (kind != OpKind::Gemm || !sm_margin) return beside_blocks(kind, gpu, blocks);
  if (gpu.gemm_cluster_sms >= 2 && gpu.sm_count > 1) {
    // Measured steps (H200, copy blocks beside cuBLASLt GEMMs planned for the SMs left:
    // calibrate/measurements/overlap-sm-h200-2026-12-02, sm-margin-h200-2026-12-03).
    constexpr std::array<std::pair<int, double>, 5> kSteps{{{1, 1.00}, {8, 1.05}, {16, 1.37}, {24, 1.38}, {32, 1.58}}};
    return cluster_steps(gpu, blocks, kSteps);
  }
  return beside_blocks(kind, gpu, blocks);
}

double grouped_row_tiles(const Op& op, int64_t tile_m) {
  // An expert's rows X ~ Binomial(T, p), p = top_k / experts (tokens routed uniformly and
  // independently); its problem takes ⌈X / tile_m⌉ row tiles, and for a count X ≥ 0,
  // ⌈X / tile_m⌉ = Σ_{j ≥ 0} [X > j·tile_m], so the experts' tiles are experts · Σ_j P(X > j·tile_m).
  const double T = static_cast<double>(op.group_tokens), E = static_cast<double>(op.group_experts);
  const double pr = std::min(1.0, static_cast<double>(op.group_top_k) / E);
  if (pr >= 1.0) return E * static_cast<double>(ceil_div(op.group_tokens, tile_m));
  const double mean = T * pr, sd = std::sqrt(T * pr * (1.0 - pr)), tm = static_cast<double>(tile_m);
  double tiles = 0;
  if (sd * sd >= 16) {
    // The normal law with continuity correction: P(X > a) = P(X ≥ a + 1) ≈ Q((a + ½ − mean) / sd).
    for (double a = 0; a <= mean + 10 * sd; a += tm)
      tiles += 0.5 * std::erfc((a + 0.5 - mean) / (sd * std::numbers::sqrt2));
    return E * tiles;
  }
  // Few rows an expert: the law itself, term by term up to where its tail is negligible.
  const int64_t top = std::min<int64_t>(op.group_tokens, static_cast<int64_t>(std::ceil(mean + 12 * sd + 1)));
  const double odds = std::log(pr) - std::log1p(-pr);
  double log_pmf = T * std::log1p(-pr), below = 0;  // P(X = x), P(X ≤ x - 1)
  for (int64_t x = 0; x <= top; ++x) {
    if (x % tile_m == 0) tiles += std::max(0.0, 1.0 - below - std::exp(log_pmf));  // P(X > x)
    below += std::exp(log_pmf);
    log_pmf += std::log(T - static_cast<double>(x)) - std::log(static_cast<double>(x) + 1.0) + odds;
  }
  return E * tiles;
}

double gemm_default_seconds(const Op& op, const GpuSpec& gpu, const ComputeProfile& p) {
  // A GEMM runs as output tiles (tm x tn) over the SMs in waves; each tile's main loop
  // streams k in steps, and short loops spend a larger share in prologue and epilogue:
  // a tile of depth kk runs at kk / (kk + k½) of its peak rate. The library picks the
  // tile and the split of k that finish first (split-K adds the partial sums' traffic).
  // A wave costs the padded tile's FLOPs whatever the real rows, so time never falls as
  // m, n or k grow. Smaller tiles reuse operands less: their peak is lower.
  struct Tile {
    int64_t m, n;
    double eff;
  };
  // The 16-row tile is the tensor cores' smallest (mma's m16): what small-batch kernels run
  // (weight-only GEMV-class kernels, Marlin), its rate extrapolated from the others by its
  // operand reuse (tm·tn / (tm + tn): 85, 64, 43, 32 → 1.0, 0.92, 0.80, 0.65; 14 → 0.40).
  static constexpr Tile kTiles[] = {{128, 256, 1.0}, {256, 128, 1.0}, {128, 128, 0.92},
                                    {64, 128, 0.80}, {64, 64, 0.65},  {16, 128, 0.40}};
  const bool fp8 = (op.dtype == DType::FP8 && gpu.peak_fp8 > 0) || op.dtype == DType::INT8;
  const double peak = gpu.peak_flops(op.dtype) * (fp8 ? p.fp8_gemm_efficiency : p.gemm_efficiency);
  const double k_half = p.gemm_k_half * (fp8 ? 2.0 : 1.0);
  const double sms = static_cast<double>(std::max(1, gpu.sm_count));
  const double bytes = static_cast<double>(op.bytes_read + op.bytes_written);
  const double batch = static_cast<double>(std::max<int64_t>(1, op.batch));
  // A grouped GEMM over experts (op.group_experts) tiles each expert's rows on its own and
  // runs its tiles whole: the grouped kernels (CUTLASS's grouped tile scheduler under
  // TensorRT-LLM's MoE GEMMs, vLLM's fused_moe) split neither k nor a tile's depth.
  const bool grouped = op.group_experts > 0 && op.group_tokens > 0 && op.group_top_k > 0;
  double best = -1;
  for (const Tile& t : kTiles) {
    const double row_tiles = grouped ? grouped_row_tiles(op, t.m) : static_cast<double>(ceil_div(op.m, t.m)) * batch;
    for (int64_t split = 1; split <= (grouped ? 1 : 8); split *= 2) {
      if (split > 1 && op.k / split < 256) break;
      const double kk = static_cast<double>(ceil_div(op.k, split));
      const double tiles = row_tiles * static_cast<double>(ceil_div(op.n, t.n)) * static_cast<double>(split);
      const double waves = std::ceil(tiles / sms);
      const double tile_flops = 2.0 * static_cast<double>(t.m * t.n) * kk;
      const double math = waves * sms * tile_flops / (peak * t.eff * kk / (kk + k_half));
      // Split-K writes fp32 partial sums and reads them back to add them.
      const double partial = split > 1 ? 8.0 * static_cast<double>(split) * static_cast<double>(op.m * op.n) * batch : 0;
      const double mem = (bytes + partial) / (gpu.hbm_bandwidth * p.memory_efficiency);
      const double t_all = std::max(math, mem);
      if (best < 0 || t_all < best) best = t_all;
    }
    // Stream-K (persistent kernels, gpu.gemm_stream_k): the whole waves run as tiles of
    // depth k; the r tiles left over share their r·k of depth out over every SM, each SM a
    // depth of r·k / SMs at that depth's rate, and their FP32 partial sums (a tile's worth an
    // SM) are written and read back to be reduced.
    if (gpu.gemm_stream_k && p.gemm_stream_k && !grouped) {
      const double tiles = static_cast<double>(ceil_div(op.m, t.m) * ceil_div(op.n, t.n)) * batch;
      const double full = std::floor(tiles / sms), rest = tiles - full * sms;
      if (rest > 0) {
        const double k = static_cast<double>(op.k), tile = 2.0 * static_cast<double>(t.m * t.n);
        const double kr = rest * k / sms;
        const double math = full * sms * tile * k / (peak * t.eff * k / (k + k_half)) +
                            sms * tile * kr / (peak * t.eff * kr / (kr + k_half));
        const double partial = 8.0 * static_cast<double>(t.m * t.n) * sms;
        const double mem = (bytes + partial) / (gpu.hbm_bandwidth * p.memory_efficiency);
        best = std::min(best, std::max(math, mem));
      }
    }
  }
  // A few rows (up to 16): GEMV-class kernels (cuBLAS's gemv, TensorRT-LLM's weight-only
  // batched GEMV) run the real FLOPs as FMAs on the CUDA cores, no tile padded, so a token's
  // GEMM over narrow weights (INT4: half a byte a weight) streams them.
  if (!grouped && static_cast<double>(op.m) * batch <= 16 && gpu.peak_fp32 > 0) {
    const double math =
        2.0 * static_cast<double>(op.m) * static_cast<double>(op.n) * static_cast<double>(op.k) * batch / gpu.peak_fp32;
    best = std::min(best, std::max(math, bytes / (gpu.hbm_bandwidth * p.memory_efficiency)));
  }
  return p.kernel_latency_s + best;
}

std::vector<std::vector<double>> program_compute_seconds(const Plan& plan, const GpuSpec& gpu,
                                                         const ComputeProfile& profile) {
  std::vector<std::vector<double>> seconds(plan.programs.size());
  for (size_t p = 0; p < plan.programs.size(); ++p) {
    for (const Op& op : plan.programs[p].ops) {
      const bool comm = is_comm(op.kind);
      seconds[p].push_back(
          comm ? 0.0 : queued_seconds(op, compute_seconds(op, gpu, profile), profile.launch_overhead_s, gpu, profile));
    }
    apply_power_cap(plan.programs[p].ops, seconds[p], profile.launch_overhead_s, gpu, profile);
  }
  return seconds;
}

}  // namespace clustersim
