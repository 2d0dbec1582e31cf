#include "plan/training_planner.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <string_view>
#include <tuple>

#include "plan/block_planner.h"
#include "plan/moe_routing.h"
#include "plan/stage_builder.h"

namespace clustersim {

std::vector<PipelineBlock> pipeline_schedule(const std::string& schedule, int64_t pp, int64_t v, int64_t M, int64_t s,
                                             int64_t group) {
  std::vector<PipelineBlock> out;
  if (pp <= 1) {
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t c = 0; c < v; ++c) out.push_back({true, m, c});
      for (int64_t c = v - 1; c >= 0; --c) out.push_back({false, m, c});
    }
    return out;
  }
  if (schedule == "gpipe") {
    for (int64_t m = 0; m < M; ++m) out.push_back({true, m, 0});
    for (int64_t m = 0; m < M; ++m) out.push_back({false, m, 0});
    return out;
  }
  if (schedule == "1f1b" || v == 1) {
    const int64_t warm = std::min(pp - s - 1, M);
    for (int64_t m = 0; m < warm; ++m) out.push_back({true, m, 0});
    for (int64_t i = 0; i < M - warm; ++i) {
      out.push_back({true, warm + i, 0});
      out.push_back({false, i, 0});
    }
    for (int64_t m = M - warm; m < M; ++m) out.push_back({false, m, 0});
    return out;
  }
  // Interleaved 1F1B (Megatron-Core's get_schedule_table): forward order over (micro-batch,
  // chunk) in groups of N micro-batches per chunk (N = pp unless given; the last group
  // takes what is left); backward runs the chunks in reverse.
  const int64_t n = group > 0 ? group : pp;
  const int64_t total = M * v;
  auto block = [&](int64_t k, bool fwd) {
    const int64_t start = (k / (n * v)) * n;  // first micro-batch of k's group
    const int64_t size = std::min(n, M - start);
    const int64_t in_group = k - start * v;
    int64_t chunk = in_group / size;
    if (!fwd) chunk = v - 1 - chunk;
    return PipelineBlock{fwd, start + in_group % size, chunk};
  };
  const int64_t warm = std::min((pp - s - 1) * 2 + (v - 1) * n, total);
  for (int64_t k = 0; k < warm; ++k) out.push_back(block(k, true));
  for (int64_t i = 0; i < total - warm; ++i) {
    out.push_back(block(warm + i, true));
    out.push_back(block(i, false));
  }
  for (int64_t k = total - warm; k < total; ++k) out.push_back(block(k, false));
  return out;
}

int64_t recomputed_layers(const TrainingLayout& l, int64_t layers) {
  if (l.recompute != "full") return 0;
  return l.recompute_num_layers < 0 ? layers : std::min(layers, l.recompute_num_layers);
}

std::vector<MemoryBreakdown> training_stage_memory(const Scenario& s, const TrainingLayout& l) {
  const ModelConfig& m = s.model;
  const bool adam = s.training.optimizer == "adam";
  std::vector<MemoryBreakdown> out;
  // Memory per stage: the schedule tells how many layer-activations are held at the peak.
  for (int64_t st = 0; st < l.pp; ++st) {
    MemoryInputs mi;
    mi.tp = l.tp;
    mi.cp = l.cp;
    mi.dp = l.dp;
    mi.ep = l.ep;
    mi.etp = l.expert_tp();
    mi.pp = l.pp;
    mi.zero_stage = l.zero_stage;
    mi.zero3_params_held = l.zero3_keep_for_backward;  // step mode keeps them too
    mi.zero3_gather_bytes = dtype_bits(l.fsdp_param_dtype) / 8.0;
    mi.grads_unsharded = l.zero3_grad_once || (l.zero_stage == 2 && l.micro_batches > 1);
    if (l.zero_stage < 3 && !l.eager) mi.grad_bytes = dtype_bits(l.grad_dtype) / 8.0;
    mi.micro_batch = l.micro_batch;
    mi.sequence_parallel = l.sequence_parallel;
    mi.full_recompute = l.recompute == "full";
    mi.op_recompute = l.recompute == "op";
    mi.adam = adam;
    mi.master_bytes = l.master_bytes;
    mi.moment_bytes = l.moment_bytes;
    mi.fp8 = l.fp8;
    mi.fp8_params = l.fp8_params;
    // A partial full recompute leaves layers that keep their scores.
    mi.unfused_scores =
        !l.flash_attention && !l.recompute_core_attn && (l.recompute != "full" || l.recompute_num_layers >= 0);
    mi.mla_up_recompute = l.mla_up_recompute;
    mi.fused_cross_entropy = l.fused_cross_entropy && l.eager;  // Megatron's fused loss keeps its FP32 softmax
    // Counted in layers, chunk by chunk: with an uneven split a chunk may hold a layer
    // fewer, or none (only the embedding or the output layer).
    std::vector<int64_t> chunk_layers(static_cast<size_t>(l.virtual_stages));
    for (int64_t c = 0; c < l.virtual_stages; ++c)
      chunk_layers[static_cast<size_t>(c)] = stage_layers(l, m.layers, c * l.pp + st).second;
    // Under full recompute, the layers a chunk does not recompute (past the first
    // recompute_num_layers; the multi-token prediction modules', which run in the last chunk
    // of the last stage, unless every layer is) keep all their activations.
    std::vector<int64_t> chunk_kept(chunk_layers.size());
    for (size_t c = 0; c < chunk_layers.size(); ++c)
      chunk_kept[c] = l.recompute == "full" ? chunk_layers[c] - recomputed_layers(l, chunk_layers[c]) : 0;
    if (st == l.pp - 1) {
      chunk_layers.back() += m.mtp_layers;
      if (l.recompute == "full" && l.recompute_num_layers >= 0) chunk_kept.back() += m.mtp_layers;
    }
    // The layers held at each point of the schedule, kept and recomputed apart; the peak is
    // the point that needs the most memory (with every layer alike, the most layers).
    std::set<std::pair<int64_t, int64_t>> held;
    int64_t live = 0, live_kept = 0;
    for (const PipelineBlock& b :
         pipeline_schedule(l.schedule, l.pp, l.virtual_stages, l.micro_batches, st, l.microbatch_group)) {
      const int64_t layers = chunk_layers[static_cast<size_t>(b.chunk)],
                    kept = chunk_kept[static_cast<size_t>(b.chunk)];
      live += b.forward ? layers : -layers;
      live_kept += b.forward ? kept : -kept;
      if (b.forward) held.emplace(live, live_kept);
    }
    const bool partial = l.recompute == "full" && l.recompute_num_layers >= 0;
    double most = -1;
    for (const auto& [layers, kept] : held) {
      MemoryInputs at = mi;
      at.in_flight_layers = static_cast<double>(layers);
      at.in_flight_kept_layers = static_cast<double>(kept);
      at.output = false;
      // Layers alike: the most layers is the most memory (the set's last, without costing each).
      const double bytes = partial ? training_memory(m, at).activations : static_cast<double>(layers);
      if (bytes > most) {
        most = bytes;
        mi.in_flight_layers = at.in_flight_layers;
        mi.in_flight_kept_layers = at.in_flight_kept_layers;
      }
    }
    MemoryBreakdown total;
    for (int64_t c = 0; c < l.virtual_stages; ++c) {
      MemoryInputs ci = mi;
      const int64_t vs = c * l.pp + st;
      std::tie(ci.first_layer, ci.end_layer) = stage_layers(l, m.layers, vs);
      ci.end_layer += ci.first_layer;
      ci.embedding = vs == 0;
      ci.output = vs == l.pp * l.virtual_stages - 1;
      ci.mtp_layers = ci.output ? m.mtp_layers : 0;
      ci.in_flight_layers = c == 0 ? mi.in_flight_layers : 0;
      ci.in_flight_kept_layers = c == 0 ? mi.in_flight_kept_layers : 0;
      // The stage's layers in flight, and the one being recomputed, are counted once.
      ci.full_recompute = c == 0 && mi.full_recompute;
      ci.op_recompute = c == 0 && mi.op_recompute;
      ci.pp = c == 0 ? l.pp : 1;
      const MemoryBreakdown b = training_memory(m, ci);
      total.weights += b.weights;
      total.gradients += b.gradients;
      total.optimizer += b.optimizer;
      total.activations += b.activations;
      total.buffers += b.buffers;
    }
    const int communicators = (l.tp > 1) + (l.dp * l.cp > 1) + (l.pp > 1) + (l.cp > 1) + (l.ep > 1);
    total.reserved = s.memory_reserve_bytes >= 0 ? static_cast<double>(s.memory_reserve_bytes)
                                                 : default_memory_reserve(total, communicators);
    out.push_back(total);
  }
  return out;
}

TrainingPlan build_training_plan(const Scenario& s, const PlannerOptions& opt) {
  if (!s.model.blocks.empty()) return build_block_plan(s, opt);
  TrainingPlan tp;
  tp.layout = check_training_layout(s);
  const TrainingLayout& l = tp.layout;
  const ModelConfig& m = s.model;
  const bool adam = s.training.optimizer == "adam";
  tp.stage_memory = training_stage_memory(s, l);
  for (const MemoryBreakdown& b : tp.stage_memory)
    if (b.total() > tp.memory.total()) tp.memory = b;
  Plan& plan = tp.plan;
  const int64_t world = l.dp * l.tp * l.pp * l.cp;
  plan.world_size = static_cast<int32_t>(world);
  plan.rank_program.assign(static_cast<size_t>(world), 0);
  plan.rank_gpu.resize(static_cast<size_t>(world));
  std::array<int32_t, kGroupKinds> none;
  none.fill(-1);
  plan.rank_groups.assign(static_cast<size_t>(world), none);
  const PlacementStrides st = placement_strides(s.parallel.placement, l);
  auto rank_of = [&](int64_t t, int64_t c, int64_t d, int64_t p) {
    return static_cast<int32_t>(t * st.tp + c * st.cp + d * st.dp + p * st.pp);
  };
  // Ranks are numbered in placement order, so rank r sits on GPU r (node-major).
  for (int64_t r = 0; r < world; ++r) plan.rank_gpu[static_cast<size_t>(r)] = static_cast<int32_t>(r);
  for (int64_t p = 0; p < l.pp; ++p)
    for (int64_t d = 0; d < l.dp; ++d)
      for (int64_t c = 0; c < l.cp; ++c)
        for (int64_t t = 0; t < l.tp; ++t)
          plan.rank_program[static_cast<size_t>(rank_of(t, c, d, p))] = static_cast<uint32_t>(p);
  // Each stage's memory against the GPUs that hold it (a topology file may mix models).
  if (opt.check_memory) {
    const int64_t gpn = s.cluster.node.gpus;
    const bool one_model = s.cluster.one_gpu_model();
    for (int64_t r = 0; r < (one_model ? 1 : world); ++r) {
      const uint32_t stage = plan.rank_program[static_cast<size_t>(r)];
      const MemoryBreakdown& need =
          one_model ? tp.memory : tp.stage_memory[std::min<size_t>(stage, tp.stage_memory.size() - 1)];
      const GpuSpec& gpu = s.cluster.node_at(static_cast<int>(plan.rank_gpu[static_cast<size_t>(r)] / gpn)).gpu;
      if (need.total() <= gpu.hbm_bytes) continue;
      char buf[160];
      std::snprintf(buf, sizeof buf, "%.1f GiB per GPU needed, %.1f GiB available on %s", need.total() / (1 << 30),
                    gpu.hbm_bytes / (1 << 30), gpu.name.c_str());
      std::string where;
      if (!one_model) where = " (stage " + std::to_string(stage) + ", rank " + std::to_string(r) + ")";
      throw InputError(s.mark("parallel"),
                       std::string("layout does not fit in memory: ") + buf + where + " (" + need.describe() + ")");
    }
  }
  auto group = [&](GroupKind kind, auto&& members) {
    std::vector<int32_t> g;
    members(g);
    if (g.size() > 1) plan.add_group(kind, std::move(g));
  };
  for (int64_t p = 0; p < l.pp; ++p)
    for (int64_t d = 0; d < l.dp; ++d)
      for (int64_t c = 0; c < l.cp; ++c) {
        group(GroupKind::TP, [&](auto& g) {
          for (int64_t t = 0; t < l.tp; ++t) g.push_back(rank_of(t, c, d, p));
        });
      }
  for (int64_t p = 0; p < l.pp; ++p)
    for (int64_t d = 0; d < l.dp; ++d)
      for (int64_t t = 0; t < l.tp; ++t)
        group(GroupKind::CP, [&](auto& g) {
          for (int64_t c = 0; c < l.cp; ++c) g.push_back(rank_of(t, c, d, p));
        });
  // Expert groups over n slots in Megatron-Core's order: EP groups of ep consecutive slots,
  // expert-DP groups of the slots that hold the same experts (slot ≡ r mod ep); `at` maps a
  // slot to its rank.
  auto expert_groups = [&](int64_t n, auto&& at) {
    for (int64_t r = 0; r < l.ep; ++r)
      group(GroupKind::EDP, [&](auto& g) {
        for (int64_t j = r; j < n; j += l.ep) g.push_back(at(j));
      });
    for (int64_t k = 0; k < n / l.ep; ++k)
      group(GroupKind::EP, [&](auto& g) {
        for (int64_t j = k * l.ep; j < (k + 1) * l.ep; ++j) g.push_back(at(j));
      });
  };
  for (int64_t p = 0; p < l.pp; ++p)
    for (int64_t t = 0; t < l.tp; ++t) {
      // Dense gradients are reduced over DP x CP (Megatron). Experts are laid out over the
      // same DP x CP ranks in Megatron-Core's order (CP innermost, then DP: j = c + cp·d):
      // an EP group is ep consecutive j, an expert-DP group the ranks that hold the same
      // experts (j ≡ r mod ep).
      group(GroupKind::DP, [&](auto& g) {
        for (int64_t d = 0; d < l.dp; ++d)
          for (int64_t c = 0; c < l.cp; ++c) g.push_back(rank_of(t, c, d, p));
      });
      if (m.moe.experts > 0 && l.expert_tp() == l.tp)
        expert_groups(l.dp * l.cp, [&](int64_t j) { return rank_of(t, j % l.cp, j / l.cp, p); });
    }
  // Whole experts on every rank (expert_tp 1 under TP): the stage's ranks in Megatron-Core's
  // order, u = t + tp·(c + cp·d), EP groups of ep consecutive u, the same experts at u ≡ r mod ep.
  if (m.moe.experts > 0 && l.expert_tp() < l.tp)
    for (int64_t p = 0; p < l.pp; ++p)
      expert_groups(l.tp * l.cp * l.dp,
                    [&](int64_t u) { return rank_of(u % l.tp, u / l.tp % l.cp, u / (l.tp * l.cp), p); });
  for (int64_t d = 0; d < l.dp; ++d)
    for (int64_t c = 0; c < l.cp; ++c)
      for (int64_t t = 0; t < l.tp; ++t)
        group(GroupKind::PP, [&](auto& g) {
          for (int64_t p = 0; p < l.pp; ++p) g.push_back(rank_of(t, c, d, p));
        });

  // Symmetry: when every TP group is one contiguous block inside a node, every DP replica
  // runs on an isomorphic part of the cluster and behaves like replica 0, which meets
  // every DP, EP and CP collective; only replica 0 is simulated.
  const int64_t gpn = s.cluster.node.gpus;
  // A node wired GPU by GPU (an NVLink mesh) or a fabric given link by link may treat the
  // replicas unlike: their TP and PP links differ, and replica 0 stands for no other.
  bool wired = !s.cluster.fabric_links.empty() || !s.cluster.node.gpu_links.empty();
  for (const NodeSpec& n : s.cluster.node_specs) wired = wired || !n.gpu_links.empty();
  const bool symmetric = opt.use_symmetry && st.tp == 1 && gpn % l.tp == 0 && !wired;
  plan.mirror_of.resize(static_cast<size_t>(world));
  for (int64_t p = 0; p < l.pp; ++p)
    for (int64_t d = 0; d < l.dp; ++d)
      for (int64_t c = 0; c < l.cp; ++c)
        for (int64_t t = 0; t < l.tp; ++t)
          plan.mirror_of[static_cast<size_t>(rank_of(t, c, d, p))] =
              symmetric ? rank_of(t, c, 0, p) : rank_of(t, c, d, p);

  double model_flops = 0, causal_attention = 0, load_sum = 0;
  int64_t load_count = 0;
  for (int64_t p = 0; p < l.pp; ++p) {
    plan.programs.emplace_back();
    Program& prog = plan.programs.back();
    prog.name = l.pp > 1 ? "stage-" + std::to_string(p) : "rank";
    StageBuilder b(plan, prog, m, l, p, adam);
    b.build();
    model_flops += b.model_flops();
    causal_attention += b.causal_attention_flops();
    load_sum += b.moe_load_sum();
    load_count += b.moe_load_count();
    for (const Op& op : prog.ops)
      if (op.kind == OpKind::Gemm || op.kind == OpKind::Attention)
        tp.hardware_flops_per_rank += op.flops / static_cast<double>(l.pp);
  }
  tp.model_flops_per_rank = model_flops / static_cast<double>(l.pp);
  tp.causal_attention_flops_per_rank = causal_attention / static_cast<double>(l.pp);
  if (load_count > 0) tp.moe_hot_rank_load = load_sum / static_cast<double>(load_count);
  return tp;
}

}  // namespace clustersim
