#include "sim/layout_estimator.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "cost_models/compute.h"
#include "cost_models/tuner.h"
#include "plan/memory.h"
#include "scenarios/error.h"
#include "sim/run.h"
#include "topology/topology.h"

namespace clustersim {

Scenario with_layout(const Scenario& s, const TrainingLayout& l) {
  Scenario c = s;
  c.parallel.dp = l.dp;
  c.parallel.tp = l.tp;
  c.parallel.pp = l.pp;
  c.parallel.cp = l.cp;
  c.parallel.ep = l.ep;
  c.parallel.expert_tp = l.expert_tp() == l.tp ? 0 : l.expert_tp();
  c.parallel.virtual_stages = l.virtual_stages;
  // The end stages' own sizes belong to the scenario's pipeline; other pipelines split evenly.
  // A key the layout puts back to its default is unwritten too: the checks that a key goes
  // with its layout look at what was written.
  auto unwrite = [&](std::initializer_list<const char*> keys) {
    for (const char* k : keys) c.marks.erase(k);
  };
  if (l.pp != s.parallel.pp || l.virtual_stages != s.parallel.virtual_stages) {
    c.parallel.first_stage_layers = c.parallel.last_stage_layers = -1;
    unwrite({"parallel.first_stage_layers", "parallel.last_stage_layers"});
  }
  c.parallel.micro_batch = l.micro_batch;
  c.parallel.zero_stage = l.zero_stage;
  if (l.zero_stage < 3) {
    // The scenario's ZeRO 3 / FSDP choices shape its ZeRO 3 layouts only.
    const ParallelConfig defaults;
    c.parallel.zero3_param_gather = defaults.zero3_param_gather;
    c.parallel.zero3_grad_sync = defaults.zero3_grad_sync;
    c.parallel.zero3_backward_prefetch = defaults.zero3_backward_prefetch;
    c.parallel.fsdp_param_dtype = defaults.fsdp_param_dtype;
    c.parallel.fsdp_reduce_dtype = defaults.fsdp_reduce_dtype;
    c.parallel.fsdp_version = defaults.fsdp_version;
    unwrite({"parallel.zero3_param_gather", "parallel.zero3_grad_sync", "parallel.zero3_backward_prefetch",
             "parallel.fsdp_param_dtype", "parallel.fsdp_reduce_dtype", "parallel.fsdp_version"});
  } else {
    // Megatron's ZeRO 0-2 gradient buffer dtype shapes those layouts only.
    c.parallel.grad_reduce_dtype = ParallelConfig{}.grad_reduce_dtype;
    unwrite({"parallel.grad_reduce_dtype"});
  }
  // FP8 weights live in a sharded optimizer: the ZeRO 0 layouts keep 16-bit weights.
  if (l.zero_stage < 1) {
    c.parallel.fp8_param_gather = false;
    unwrite({"parallel.fp8_param_gather"});
  }
  c.parallel.schedule = l.schedule;
  // The micro-batch group a layout was checked with (the scenario's own, or pp); the
  // layouts search builds carry none and take the default.
  c.parallel.microbatch_group =
      l.schedule == "interleaved-1f1b" && l.pp > 1 && l.microbatch_group >= l.pp ? l.microbatch_group : 0;
  c.parallel.sequence_parallel = l.sequence_parallel;
  c.training.recompute = l.recompute;
  // The modules a selective recompute names belong to the layouts that recompute selectively.
  if (l.recompute != "selective") {
    c.training.recompute_modules = TrainingConfig{}.recompute_modules;
    unwrite({"training.recompute_modules"});
  }
  // A partial recompute belongs to the layouts that recompute in full.
  c.training.recompute_num_layers = l.recompute == "full" ? l.recompute_num_layers : -1;
  c.training.global_batch = l.global_batch;
  c.output_sqlite.clear();
  c.output_trace.clear();
  return c;
}

std::string describe_layout(const TrainingLayout& l) {
  std::string out = "dp " + std::to_string(l.dp) + " tp " + std::to_string(l.tp) + " pp " + std::to_string(l.pp);
  if (l.cp > 1) out += " cp " + std::to_string(l.cp);
  if (l.ep > 1) out += " ep " + std::to_string(l.ep);
  if (l.expert_tp() != l.tp) out += " etp " + std::to_string(l.expert_tp());  // whole experts on every rank
  out += ", mb " + std::to_string(l.micro_batch);
  if (l.pp > 1) out += ", " + l.schedule + (l.virtual_stages > 1 ? " v" + std::to_string(l.virtual_stages) : "");
  if (l.pp > 1 && l.virtual_stages > 1 && l.microbatch_group > l.pp)
    out += " N" + std::to_string(l.microbatch_group);  // micro-batches per chunk, when not the default pp
  if (l.zero_stage > 0) out += ", zero " + std::to_string(l.zero_stage);
  if (l.sequence_parallel) out += ", sp";
  if (l.recompute != "none") out += ", recompute " + l.recompute;
  if (l.recompute == "full" && l.recompute_num_layers >= 0)
    out += " " + std::to_string(l.recompute_num_layers) + " a chunk";
  return out;
}

LayoutEstimator::LayoutEstimator(const Scenario& s) : s_(s) {
  apply_calibration(s, opt_.compute, opt_.network);
  collective_options(s, opt_);
  opt_.flow = false;
  opt_.record_link_usage = false;
  topo_ = std::make_unique<Topology>(s.cluster);
  net_ = std::make_unique<AnalyticNetwork>(*topo_, opt_.network);
}

LayoutEstimator::~LayoutEstimator() = default;

double LayoutEstimator::memory_bytes(const TrainingLayout& l) const {
  double peak = 0;
  for (const MemoryBreakdown& b : training_stage_memory(with_layout(s_, l), l)) peak = std::max(peak, b.total());
  return peak;
}

// A layer's time, one micro-batch, simulated on the executor: a probe scenario of
// kProbeLayers transformer layers (so that the embedding's and the loss's kernels weigh in
// its power windows about as little as in a whole step's, and the clock the cap leaves the
// layers is a step's), no pipeline, one micro-batch per DP rank, on as many nodes as the
// TP × CP × EP groups need (so their communication crosses what it would cross), its DP
// gradient buckets after the backward (in a step only the last micro-batch's backward
// runs beside them; estimate() prices them).
constexpr int64_t kProbeLayers = 8;
const LayoutEstimator::LayerTimes& LayoutEstimator::layer_times(const TrainingLayout& l) {
  const auto key =
      std::make_tuple(l.tp, l.cp, l.ep, l.micro_batch, l.sequence_parallel, l.recompute, l.recompute_num_layers);
  auto it = layers_.find(key);
  if (it != layers_.end()) return it->second;
  if (l.recompute == "full" && l.recompute_num_layers >= 0) {
    // Some layers of each chunk recomputed: a layer's time is the mean over the chunk's
    // layers of the probes without recompute and with it.
    TrainingLayout all = l, none = l;
    all.recompute_num_layers = -1;
    none.recompute = "none";
    none.recompute_num_layers = -1;
    const LayerTimes a = layer_times(all), n = layer_times(none);
    const int64_t chunk = std::max<int64_t>(1, s_.model.layers / std::max<int64_t>(1, l.pp * l.virtual_stages));
    const double r = static_cast<double>(recomputed_layers(l, chunk)) / static_cast<double>(chunk);
    LayerTimes t = n;
    t.forward = n.forward + r * (a.forward - n.forward);
    t.backward = n.backward + r * (a.backward - n.backward);
    t.dense_forward = n.dense_forward + r * (a.dense_forward - n.dense_forward);
    t.dense_backward = n.dense_backward + r * (a.dense_backward - n.dense_backward);
    return layers_.emplace(key, t).first->second;
  }
  Scenario p = s_;
  p.model.layers = kProbeLayers;
  p.model.moe.dense_layers = 0;
  p.model.mtp_layers = 0;  // the modules' layers: priced on the last stage in estimate()
  const int64_t gpn = s_.cluster.node.gpus;
  const int64_t group = l.tp * l.cp * l.ep;
  p.cluster.nodes = static_cast<int>(std::max<int64_t>(1, (group + gpn - 1) / gpn));
  TrainingLayout pl = l;
  pl.pp = 1;
  pl.virtual_stages = 1;
  pl.schedule = "1f1b";
  pl.zero_stage = 0;
  pl.dp = static_cast<int64_t>(p.cluster.nodes) * gpn / (l.tp * l.cp);
  pl.global_batch = pl.dp * l.micro_batch;
  p = with_layout(p, pl);
  p.training.grad_nan_check = "false";  // once a step, not a layer's: priced in estimate()
  p.parallel.overlap_grad_reduce = false;
  LayerTimes t = probe(p);
  // A mixture of experts with leading dense layers: those layers probed as dense.
  if (s_.model.moe.experts > 0 && s_.model.moe.dense_layers > 0) {
    Scenario d = p;
    d.model.moe.dense_layers = kProbeLayers;
    const LayerTimes dt = probe(d);
    t.dense_forward = dt.forward;
    t.dense_backward = dt.backward;
  }
  return layers_.emplace(key, t).first->second;
}

LayoutEstimator::LayerTimes LayoutEstimator::probe(const Scenario& p) {
  // A probe of one layer costs time, not memory: its micro-batch need not fit on its own.
  PlannerOptions po;
  po.check_memory = false;
  const TrainingPlan plan = build_training_plan(p, po);
  Topology topo(p.cluster);
  const ExecResult r = execute_plan(plan.plan, topo, opt_);
  LayerTimes t;
  const Program& prog = plan.plan.programs[plan.plan.rank_program[0]];
  int64_t f0 = INT64_MAX, f1 = 0, b0 = INT64_MAX, b1 = 0;
  for (const SpanRecord& sp : r.spans) {
    if (sp.rank != 0) continue;
    const Op& op = prog.ops[sp.op];
    const bool fwd = op.phase == Phase::Forward;
    if (op.phase != Phase::Forward && op.phase != Phase::Backward) continue;
    if (op.kind == OpKind::Collective && op.group != GroupKind::TP && op.group != GroupKind::CP &&
        op.group != GroupKind::EP)
      continue;  // DP gradient buckets: costed on the real DP group below
    if (op.layer >= 0) {
      (fwd ? f0 : b0) = std::min(fwd ? f0 : b0, sp.start_ps);
      (fwd ? f1 : b1) = std::max(fwd ? f1 : b1, sp.end_ps);
    } else {
      const double d = static_cast<double>(sp.end_ps - sp.start_ps) * 1e-12;
      const std::string& name = plan.plan.names[op.name];
      (name.find("embed") != std::string::npos ? t.first_extra : t.last_extra) += d;
    }
  }
  t.forward = f1 > f0 ? static_cast<double>(f1 - f0) * 1e-12 / kProbeLayers : 0;
  t.backward = b1 > b0 ? static_cast<double>(b1 - b0) * 1e-12 / kProbeLayers : 0;
  return t;
}

double LayoutEstimator::collective_seconds(CollectiveKind kind, const std::vector<int32_t>& gpus, double bytes) {
  if (gpus.size() < 2 || bytes <= 0) return 0;
  const auto key =
      std::make_tuple(static_cast<int>(kind), gpus[0], gpus[1] - gpus[0], gpus.size(), static_cast<int64_t>(bytes));
  auto it = colls_.find(key);
  if (it != colls_.end()) return it->second;
  const GroupLayout layout = layout_of(*topo_, gpus);
  const CollectiveChoice c =
      choose_collective(kind, bytes, layout, gpus, *net_, opt_.network, opt_.algorithm, opt_.protocol);
  const double t =
      c.measured
          ? c.predicted_s
          : net_->run(expand_collective(CollectiveRequest{kind, c.algo, c.proto, bytes, 0}, layout, opt_.network), gpus)
                .seconds;
  return colls_.emplace(key, t).first->second;
}

LayoutEstimate LayoutEstimator::estimate(const TrainingLayout& l) {
  LayoutEstimate e;
  e.memory_bytes = memory_bytes(l);
  const LayerTimes& lt = layer_times(l);
  const ModelConfig& m = s_.model;
  const PlacementStrides st = placement_strides(s_.parallel.placement, l);
  const double bytes_per = dtype_bits(m.dtype) / 8.0;

  // The slowest stage's micro-batch: its layers (split as the planner splits them: the
  // first virtual stages take the remainder, or the end stages their own sizes), the
  // embedding on the first stage, the logits and loss on the last with each multi-token
  // prediction module's layer, logits and loss, and a send and a receive per model chunk.
  int64_t fullest = 0;
  double mb = 0;
  for (int64_t st_i = 0; st_i < l.pp; ++st_i) {
    int64_t n = 0, dense = 0;
    for (int64_t c = 0; c < l.virtual_stages; ++c) {
      const auto [first, count] = stage_layers(l, m.layers, c * l.pp + st_i);
      n += count;
      if (m.moe.experts > 0) dense += std::max<int64_t>(0, std::min(first + count, m.moe.dense_layers) - first);
    }
    fullest = std::max(fullest, n);
    double t = static_cast<double>(n - dense) * (lt.forward + lt.backward) +
               static_cast<double>(dense) * (lt.dense_forward + lt.dense_backward);
    if (st_i == 0) t += lt.first_extra;
    if (st_i == l.pp - 1)
      t += lt.last_extra + static_cast<double>(m.mtp_layers) * (lt.forward + lt.backward + lt.last_extra);
    mb = std::max(mb, t);
  }
  if (l.pp > 1) {
    const double act = static_cast<double>(l.micro_batch * m.seq_len / l.cp * m.hidden) * bytes_per /
                       (l.sequence_parallel ? static_cast<double>(l.tp) : 1.0);
    const std::vector<int32_t> pair = {0, static_cast<int32_t>(st.pp)};
    CollectiveStep step;
    step.transfers.push_back(Transfer{0, 1, act, 0});
    Expansion x;
    x.base_latency = opt_.network.base(LatencyFamily::Ring, Protocol::Simple);
    x.steps.push_back(step);
    const double send = net_->run(x, pair).seconds;
    // Posted a block ahead (parallel.overlap_p2p_comm: the interleaved schedule's default),
    // a chunk's transfers run beside the other direction's block: none is on the path.
    const std::string& o = s_.parallel.overlap_p2p_comm;
    const bool overlapped = o == "true" || (o == "auto" && l.schedule == "interleaved-1f1b");
    if (!overlapped) mb += 2.0 * static_cast<double>(l.virtual_stages) * send;
  }
  const double m_count = static_cast<double>(l.micro_batches);
  e.compute_s = m_count * mb;
  e.bubble_s = static_cast<double>(l.pp - 1) / static_cast<double>(l.virtual_stages) * mb;

  // Gradients of the fullest stage over its DP × CP group (rank 0's).
  std::vector<int32_t> dp_group;
  for (int64_t d = 0; d < l.dp; ++d)
    for (int64_t c = 0; c < l.cp; ++c) dp_group.push_back(static_cast<int32_t>(d * st.dp + c * st.cp));
  std::sort(dp_group.begin(), dp_group.end());
  // Expert gradients and weights go over the ranks that hold the same experts (rank 0's
  // expert-DP group, as the planner forms it: j = c + cp·d ≡ 0 mod ep; with whole experts
  // on every rank, u = t + tp·(c + cp·d) ≡ 0 mod ep).
  std::vector<int32_t> edp_group;
  const int64_t etp_span = l.expert_tp() == 1 ? l.tp : 1;  // TP ranks the EP groups also take
  for (int64_t u = 0; u < etp_span * l.dp * l.cp; u += l.ep) {
    const int64_t t = u % etp_span, j = u / etp_span;
    edp_group.push_back(static_cast<int32_t>(t * st.tp + (j / l.cp) * st.dp + (j % l.cp) * st.cp));
  }
  std::sort(edp_group.begin(), edp_group.end());
  MemoryInputs mi;
  mi.tp = l.tp;
  mi.ep = l.ep;
  mi.etp = l.expert_tp();
  mi.first_layer = 0;
  mi.end_layer = fullest;
  mi.embedding = true;
  mi.output = l.pp == 1;
  const StageParams sp = stage_params(m, mi);
  const double params = sp.dense + sp.expert;
  const double grad_per_param = l.zero_stage < 3         ? dtype_bits(main_grad_dtype(s_)) / 8.0
                                : m.dtype == DType::FP16 ? 2.0
                                                         : 4.0;
  const double grad_bytes = params * grad_per_param;
  // A collective of the dense share over DP x CP and the experts' over their expert-DP group,
  // one after the other on the DP stream.
  auto dense_and_expert = [&](CollectiveKind kind, double per_param, double scale) {
    return collective_seconds(kind, dp_group, sp.dense * per_param * scale) +
           collective_seconds(kind, edp_group, sp.expert * per_param * scale);
  };
  const double shard = l.zero_stage >= 1 ? static_cast<double>(l.dp * l.cp) : 1.0;
  // Buckets as the planner forms them: gradients join in backward order (the output layer,
  // the layers last to first, the embedding) and a bucket closes at the first layer that
  // takes it to bucket_size, so a layer larger than a bucket is a bucket of its own.
  double buckets = 0;
  {
    const double cap = static_cast<double>(std::max<int64_t>(1, l.bucket_params));
    double open = 0;
    auto join = [&](double p) {
      open += p;
      if (open >= cap) buckets += 1, open = 0;
    };
    MemoryInputs part = mi;
    part.embedding = part.output = false;
    std::vector<double> layer(static_cast<size_t>(fullest));
    for (int64_t i = 0; i < fullest; ++i) {
      part.first_layer = i;
      part.end_layer = i + 1;
      const StageParams lp = stage_params(m, part);
      layer[static_cast<size_t>(i)] = lp.dense + lp.expert;
    }
    const double ends = std::max(0.0, params - std::accumulate(layer.begin(), layer.end(), 0.0));  // embedding, output
    if (mi.output) join(mi.embedding ? ends / 2 : ends);
    for (auto it = layer.rbegin(); it != layer.rend(); ++it) join(*it);
    if (mi.embedding) join(mi.output ? ends / 2 : ends);
    if (open > 0 || buckets == 0) buckets += 1;
  }
  if (dp_group.size() > 1) {
    const double reduce = dense_and_expert(
        l.zero_stage >= 1 ? CollectiveKind::ReduceScatter : CollectiveKind::AllReduce, grad_per_param, 1.0);
    // Buckets start as the last micro-batch's backward frees them: only what outlasts
    // that backward (and at least the last bucket) is exposed.
    const double hidden = static_cast<double>(fullest) * lt.backward;
    e.dp_exposed_s = std::max(reduce / buckets, reduce - hidden);
    if (l.zero_stage == 1 || l.zero_stage == 2) {
      // The updated parameters' all-gather, whole: the simulation's first forward waits on
      // its buckets about as long as they take (the Search test's dense layouts).
      e.dp_exposed_s += dense_and_expert(CollectiveKind::AllGather, bytes_per, 1.0);
    }
    if (l.zero_stage == 3) {
      // Every micro-batch gathers each layer's weights for forward and backward and
      // reduce-scatters its gradients, all on the one DP stream in program order: the
      // forward gathers run ahead of the layers (prefetched). In backward, what a layer
      // waits for depends on when the gather of the layer below is issued
      // (parallel.zero3_backward_prefetch): from this layer's pre- or post-backward hook (pre,
      // post), the stream's reduce-scatter of the layer above and this gather run beside its
      // kernels; when the next layer starts (none), both queue in front of it.
      const double per_layer = 1.0 / static_cast<double>(fullest);
      const double gather = dense_and_expert(CollectiveKind::AllGather, bytes_per, per_layer);
      const double scatter = dense_and_expert(CollectiveKind::ReduceScatter, 4.0, per_layer);
      // The kernels beside a collective run on the SMs its channels leave them
      // (beside_collective): the time they overlap costs (1 - 1/f) of itself again.
      const std::string& prefetch = s_.parallel.zero3_backward_prefetch;
      const bool ahead = prefetch != "none";
      const double backward = ahead ? std::max(0.0, gather + scatter - lt.backward) : gather + scatter;
      const double beside = std::min(gather, lt.forward) + (ahead ? std::min(gather + scatter, lt.backward) : 0.0);
      const double f = beside_collective(OpKind::Gemm, s_.cluster.node.gpu, opt_.compute);
      e.dp_exposed_s += m_count * static_cast<double>(fullest) *
                        (std::max(0.0, gather - lt.forward) + backward + beside * (1.0 - 1.0 / f));
    }
  }
  Op opt;
  opt.kind = OpKind::Memory;
  const double state = s_.training.optimizer == "adam" ? 12.0 : 8.0;
  opt.bytes_read = static_cast<int64_t>(params / shard * (bytes_per + 4 + state));
  opt.bytes_written = static_cast<int64_t>(params / shard * (bytes_per + state));
  opt.flops = params / shard * 12;
  const double gap = opt_.compute.launch_overhead_s;
  e.optimizer_s = queued_seconds(opt, compute_seconds(opt, s_.cluster.node.gpu, opt_.compute), gap, s_.cluster.node.gpu,
                                 opt_.compute) +
                  gap;
  // training.grad_nan_check: each bucket's norm and the host's wait, once a step, on the
  // compute stream of the last micro-batch's backward.
  if (l.grad_nan_check) {
    Op norm;
    norm.kind = OpKind::Memory;
    norm.bytes_read = static_cast<int64_t>(grad_bytes / buckets);
    // As the executor runs them: the norm from a full queue, the wait a host time; each after its gap.
    const double norm_s = queued_seconds(norm, compute_seconds(norm, s_.cluster.node.gpu, opt_.compute), gap,
                                         s_.cluster.node.gpu, opt_.compute);
    e.optimizer_s += buckets * (norm_s + opt_.compute.host_sync_s + 2 * gap);
  }
  e.total_s = e.compute_s + e.bubble_s + e.dp_exposed_s + e.optimizer_s;
  return e;
}

}  // namespace clustersim
