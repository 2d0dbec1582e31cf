// A training run's outputs: its timeline, the SQLite database and trace it writes, and the
// summary as a table and as one JSON line (sim/run.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "reports/output_file.h"
#include "reports/sqlite_writer.h"
#include "reports/trace_writer.h"
#include "scenarios/units.h"
#include "sim/run.h"

namespace clustersim {

namespace fs = std::filesystem;

Timeline make_timeline(const RunOutcome& run) {
  Timeline t;
  const Scenario& s = run.scenario;
  t.run.name = s.name;
  t.run.source = "sim";
  t.run.kind = "training";
  t.run.network_model = s.network_model;
  t.run.scenario_yaml = s.merged_yaml;
  t.run.seed = s.seed;
  t.run.metrics = run.metrics;
  t.run.samples = run.samples;
  if (run.goodput)
    for (const FaultEvent& e : run.goodput->timeline.events)
      t.run.faults.push_back(FaultSpan{e.start_s, e.end_s, e.kind, e.component});
  // Memory of each pipeline stage (every rank of a stage holds the same) and the GPU's,
  // for reports.
  t.run.metrics.emplace_back("gpu_memory_bytes", std::round(s.cluster.node.gpu.hbm_bytes));  // whole bytes
  for (size_t i = 0; i < run.plan.stage_memory.size(); ++i)
    t.run.metrics.emplace_back("memory_stage_" + std::to_string(i) + "_bytes",
                               std::round(run.plan.stage_memory[i].total()));
  const Plan& plan = run.plan.plan;
  // Each rank's representative: the executor's (the plan's mirrors, and TP ranks it folded).
  const std::vector<int32_t>& rep = run.exec.representative.empty() ? plan.mirror_of : run.exec.representative;
  // A cluster of several GPU models: each stage against the smallest GPU that holds it.
  if (!s.cluster.one_gpu_model() && !run.plan.stage_memory.empty()) {
    std::vector<double> cap(run.plan.stage_memory.size(), 0.0);
    const int64_t gpn = s.cluster.node.gpus;
    for (int32_t r = 0; r < plan.world_size; ++r) {
      const size_t stage = plan.rank_program[static_cast<size_t>(r)];
      if (stage >= cap.size()) continue;
      const double hbm = s.cluster.node_at(static_cast<int>(plan.rank_gpu[static_cast<size_t>(r)] / gpn)).gpu.hbm_bytes;
      cap[stage] = cap[stage] > 0 ? std::min(cap[stage], hbm) : hbm;
    }
    for (size_t i = 0; i < cap.size(); ++i)
      if (cap[i] > 0)
        t.run.metrics.emplace_back("gpu_memory_stage_" + std::to_string(i) + "_bytes", std::round(cap[i]));
  }
  t.plan = &plan;
  const Topology& topo = *run.topology;
  for (int32_t r = 0; r < plan.world_size; ++r) {
    const int gpu = plan.rank_gpu[static_cast<size_t>(r)];
    t.ranks.push_back(RankInfo{r, topo.node_of(gpu), gpu % topo.gpus_per_node(), topo.vertex(topo.gpu_vertex(gpu)).name,
                               plan.rank_program[static_cast<size_t>(r)], rep[static_cast<size_t>(r)]});
  }
  for (const Link& l : topo.links())
    t.links.push_back(LinkInfo{l.id, topo.vertex(l.src).name, topo.vertex(l.dst).name, std::string(to_string(l.cls)),
                               l.bandwidth, l.latency});
  // Ranks whose spans equal, op for op and picosecond for picosecond, those of an
  // earlier rank of the same program (the TP ranks of a stage, usually) are written as
  // its mirrors: ranks.mirror_of names the rank whose spans stand for them, as it does
  // for the ranks symmetry never simulated. The timeline then grows with the distinct
  // programs' behaviours, not with the ranks.
  std::vector<std::vector<uint32_t>> by_rank(static_cast<size_t>(plan.world_size));
  for (uint32_t i = 0; i < run.exec.spans.size(); ++i)
    by_rank[static_cast<size_t>(run.exec.spans[i].rank)].push_back(i);
  auto same = [&](const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      const SpanRecord &x = run.exec.spans[a[i]], &y = run.exec.spans[b[i]];
      if (x.op != y.op || x.stream != y.stream || x.start_ps != y.start_ps || x.end_ps != y.end_ps) return false;
    }
    return true;
  };
  std::unordered_map<uint64_t, std::vector<int32_t>> reps;  // (program, span-count, hash) -> representatives
  std::vector<int32_t> folded_to(static_cast<size_t>(plan.world_size), -1);
  for (int32_t r = 0; r < plan.world_size; ++r) {
    const auto& mine = by_rank[static_cast<size_t>(r)];
    if (mine.empty() || rep[static_cast<size_t>(r)] != r) continue;
    uint64_t h = plan.rank_program[static_cast<size_t>(r)] * 0x9e3779b97f4a7c15ULL ^ mine.size();
    for (uint32_t i : mine) {
      const SpanRecord& x = run.exec.spans[i];
      h = (h ^ (static_cast<uint64_t>(x.op) << 8 ^ x.stream)) * 0x100000001b3ULL;
      h = (h ^ static_cast<uint64_t>(x.start_ps)) * 0x100000001b3ULL;
      h = (h ^ static_cast<uint64_t>(x.end_ps)) * 0x100000001b3ULL;
    }
    auto& list = reps[h];
    for (int32_t rep : list)
      if (plan.rank_program[static_cast<size_t>(rep)] == plan.rank_program[static_cast<size_t>(r)] &&
          same(by_rank[static_cast<size_t>(rep)], mine)) {
        folded_to[static_cast<size_t>(r)] = rep;
        break;
      }
    if (folded_to[static_cast<size_t>(r)] < 0) list.push_back(r);
  }
  for (RankInfo& ri : t.ranks)
    if (folded_to[static_cast<size_t>(ri.mirror_of)] >= 0) ri.mirror_of = folded_to[static_cast<size_t>(ri.mirror_of)];
  t.spans.reserve(run.exec.spans.size());
  for (const SpanRecord& sp : run.exec.spans)
    if (folded_to[static_cast<size_t>(sp.rank)] < 0) t.spans.push_back(sp);
  t.borrowed_link_usage = &run.exec.link_usage;
  return t;
}

namespace {
// The pipeline stage a rank belongs to, from the placement's strides.
int64_t stage_of_rank(const Scenario& s, const TrainingLayout& l, int32_t r) {
  const PlacementStrides st = placement_strides(s.parallel.placement, l);
  return (r / st.pp) % std::max<int64_t>(1, l.pp);
}
}  // namespace

void write_outputs(const RunOutcome& run) {
  const Scenario& s = run.scenario;
  if (s.output_sqlite.empty() && s.output_trace.empty()) return;
  const Timeline t = make_timeline(run);
  for (const std::string* p : {&s.output_sqlite, &s.output_trace})
    if (!p->empty()) make_parent_dirs(*p);
  if (!s.output_sqlite.empty()) write_sqlite(t, s.output_sqlite);
  if (!s.output_trace.empty()) {
    if (s.trace_ranks.empty() && s.trace_stages.empty()) {
      write_chrome_trace(t, s.output_trace);
    } else {
      // The ranks asked for (all, without a list), of the stages asked for; a mirror
      // shows the spans of the rank it mirrors, under its own number.
      const Plan& plan = run.plan.plan;
      std::vector<int32_t> ranks;
      if (s.trace_ranks.empty())
        for (const RankInfo& r : t.ranks)
          if (r.mirror_of == r.rank) ranks.push_back(r.rank);
      for (int64_t r : s.trace_ranks)
        if (r < plan.world_size) ranks.push_back(static_cast<int32_t>(r));
      std::sort(ranks.begin(), ranks.end());
      ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
      auto stage_ok = [&](int32_t r) {
        if (s.trace_stages.empty()) return true;
        const int64_t stage = stage_of_rank(s, run.plan.layout, r);
        return std::find(s.trace_stages.begin(), s.trace_stages.end(), stage) != s.trace_stages.end();
      };
      std::unordered_map<int32_t, std::vector<int32_t>> shown_as;  // rank with spans -> ranks it is shown as
      for (int32_t r : ranks)
        if (stage_ok(r)) shown_as[t.ranks[static_cast<size_t>(r)].mirror_of].push_back(r);
      Timeline f = t;
      f.spans.clear();
      for (const SpanRecord& sp : t.spans) {
        auto it = shown_as.find(sp.rank);
        if (it == shown_as.end()) continue;
        for (int32_t r : it->second) {
          SpanRecord c = sp;
          c.rank = r;
          f.spans.push_back(c);
        }
      }
      write_chrome_trace(f, s.output_trace);
    }
  }
}

std::string summary_table(const RunOutcome& run) {
  const Scenario& s = run.scenario;
  const TrainingLayout& l = run.plan.layout;
  auto get = [&](const char* k) {
    const double* v = find_metric(run.metrics, k);
    return v ? *v : 0.0;
  };
  // The power cap's clock, where it binds (docs/model.md, "Clocks under the power cap").
  std::string clock;
  if (get("power_clock") < 1.0) {
    char c[160];
    std::snprintf(c, sizeof c, "; power-capped clock %.0f%% of boost at the lowest (slowest board: capped rate x%.3f)",
                  100.0 * get("power_clock"), get("slowest_board"));
    clock = c;
  }
  std::string recompute;
  if (l.recompute != "none") recompute = ", recompute " + l.recompute;
  if (l.recompute == "full" && l.recompute_num_layers >= 0)
    recompute += " (the first " + std::to_string(l.recompute_num_layers) + " layers of each chunk)";
  char buf[2048];
  std::snprintf(
      buf, sizeof buf,
      "scenario        %s\n"
      "model           %s (%.2fB parameters), seq %lld, %s\n"
      "cluster         %s, %s network\n"
      "layout          dp %lld  tp %lld  pp %lld  cp %lld  ep %lld%s, %s, ZeRO %lld, micro-batch %lld x %lld, global "
      "batch %lld%s\n"
      "iteration       %.6f s   (%lld iteration(s): %.6f s)\n"
      "throughput      %.1f tokens/s\n"
      "per GPU         %.1f TFLOP/s model, %.1f TFLOP/s hardware, MFU %.1f%%%s\n"
      "communication   exposed %.6f s (tp %.6f, dp %.6f, pp %.6f, cp %.6f, ep %.6f); compute busy %.6f s\n"
      "pipeline bubble %.6f s (%.1f%%)\n"
      "memory per GPU  %s (%s)\n"
      "simulated       %lld of %lld ranks (symmetry), %lld events\n",
      s.name.c_str(), s.model.name.c_str(), static_cast<double>(s.model.total_params()) / 1e9,
      static_cast<long long>(s.model.seq_len), std::string(to_string(s.model.dtype)).c_str(),
      describe(s.cluster).c_str(), s.network_model.c_str(), static_cast<long long>(l.dp), static_cast<long long>(l.tp),
      static_cast<long long>(l.pp), static_cast<long long>(l.cp), static_cast<long long>(l.ep),
      l.sequence_parallel ? " (SP)" : "",
      l.pp > 1 ? (l.schedule + (l.virtual_stages > 1 ? " x" + std::to_string(l.virtual_stages) : std::string())).c_str()
               : "no pipeline",
      static_cast<long long>(l.zero_stage), static_cast<long long>(l.micro_batch),
      static_cast<long long>(l.micro_batches), static_cast<long long>(l.global_batch), recompute.c_str(),
      get("iteration_time_s"), static_cast<long long>(s.training.iterations), get("total_time_s"), get("tokens_per_s"),
      get("tflops_per_gpu"), get("hardware_tflops_per_gpu"), 100.0 * get("mfu"), clock.c_str(), get("exposed_comm_s"),
      get("exposed_comm_tp_s"), get("exposed_comm_dp_s"), get("exposed_comm_pp_s"), get("exposed_comm_cp_s"),
      get("exposed_comm_ep_s"), get("compute_busy_s"), get("bubble_s"), 100.0 * get("bubble_fraction"),
      format_size(static_cast<int64_t>(get("peak_memory_per_gpu_bytes"))).c_str(), run.plan.memory.describe().c_str(),
      static_cast<long long>(run.exec.simulated_ranks.size()), static_cast<long long>(s.gpus()),
      static_cast<long long>(run.exec.events));
  std::string out = buf;
  if (!s.cluster.one_gpu_model() && s.chakra_dir.empty()) {
    // Each stage's GPU models and its compute: the slowest stage sets the pace.
    const Plan& plan = run.plan.plan;
    std::vector<std::vector<std::string>> models(static_cast<size_t>(l.pp));
    for (int32_t r = 0; r < plan.world_size; ++r) {
      const auto st = static_cast<size_t>(plan.rank_program[static_cast<size_t>(r)]);
      if (st >= models.size()) continue;
      const std::string& name = run.topology->gpu_of(plan.rank_gpu[static_cast<size_t>(r)]).name;
      if (std::find(models[st].begin(), models[st].end(), name) == models[st].end()) models[st].push_back(name);
    }
    double slowest = 0;
    for (int64_t st = 0; st < l.pp; ++st)
      slowest = std::max(slowest, get(("stage_" + std::to_string(st) + "_compute_busy_s").c_str()));
    std::string line = "stages         ";
    for (int64_t st = 0; st < l.pp; ++st) {
      std::string names;
      for (const std::string& m : models[static_cast<size_t>(st)]) names += (names.empty() ? "" : "+") + m;
      const double busy = get(("stage_" + std::to_string(st) + "_compute_busy_s").c_str());
      std::snprintf(buf, sizeof buf, "%s %lld: %s, compute %.6f s%s", st ? " |" : "", static_cast<long long>(st),
                    names.c_str(), busy, busy == slowest && l.pp > 1 ? " (slowest)" : "");
      line += buf;
    }
    out += line + "\n";
  }
  if (!s.model.blocks.empty()) {
    // A model of blocks: its layers and samples instead of tokens.
    int64_t layers = 0;
    for (const BlockSpec& b : s.model.blocks) layers += b.count;
    std::snprintf(buf, sizeof buf, "model           %s (%.3fB parameters, %lld layers in %zu blocks), %s",
                  s.model.name.c_str(), static_cast<double>(s.model.total_params()) / 1e9,
                  static_cast<long long>(layers), s.model.blocks.size(), std::string(to_string(s.model.dtype)).c_str());
    const size_t from = out.find("model           "), to = out.find('\n', from);
    out.replace(from, to - from, buf);
    const size_t tf = out.find("throughput      "), tt = out.find('\n', tf);
    std::snprintf(buf, sizeof buf, "throughput      %.3f samples/s", get("samples_per_s"));
    out.replace(tf, tt - tf, buf);
  }
  if (!s.chakra_dir.empty()) {
    // A workload of Chakra traces has no model: say what it is instead.
    const size_t from = out.find("model           "), to = out.find('\n', from);
    out.replace(from, to - from,
                "workload        Chakra traces in " + s.chakra_dir + " (" + std::to_string(run.plan.plan.world_size) +
                    " ranks, " + std::to_string(run.plan.plan.programs.size()) + " distinct program(s))");
    // Nor a layout the simulator chose: the traces carry theirs.
    const size_t lf = out.find("layout          "), lt = out.find('\n', lf);
    if (lf != std::string::npos) out.replace(lf, lt - lf, "layout          the traces' own (their groups and ops)");
  }
  if (s.model.moe.routing.dist != "even") {
    std::snprintf(buf, sizeof buf, "MoE routing     %s: the most-loaded EP rank takes %.3fx an even share (mean)\n",
                  s.model.moe.routing.dist.c_str(), get("moe_hot_rank_load"));
    out += buf;
  }
  if (s.variability.any()) {
    const VariabilityConfig& v = s.variability;
    std::string what;
    auto add = [&](const std::string& x) { what += (what.empty() ? "" : ", ") + x; };
    if (v.gpu_speed.dist != "none") add("GPU speed " + v.gpu_speed.dist + " sigma " + format_number(v.gpu_speed.sigma));
    if (v.link_speed.dist != "none")
      add("link speed " + v.link_speed.dist + " sigma " + format_number(v.link_speed.sigma));
    if (v.kernel_jitter > 0) add("kernel jitter " + format_number(v.kernel_jitter));
    if (!v.stragglers.empty()) add(std::to_string(v.stragglers.size()) + " straggler(s)");
    std::snprintf(buf, sizeof buf,
                  "variability     %s; slowest GPU x%.3f; each simulated rank runs at the slowest of the ranks it "
                  "stands for\n",
                  what.c_str(), get("slowest_gpu_slowdown"));
    out += buf;
  }
  if (get("samples") > 0) {
    std::snprintf(buf, sizeof buf,
                  "samples         %lld draws: iteration p5 %.6f  p50 %.6f  p95 %.6f s; MFU p5 %.1f%%  p50 %.1f%%  "
                  "p95 %.1f%%\n",
                  static_cast<long long>(get("samples")), get("iteration_time_s_p5"), get("iteration_time_s_p50"),
                  get("iteration_time_s_p95"), 100 * get("mfu_p5"), 100 * get("mfu_p50"), 100 * get("mfu_p95"));
    out += buf;
  }
  if (run.goodput) {
    const GoodputReport& g = *run.goodput;
    std::snprintf(buf, sizeof buf,
                  "goodput         %.1f%% of %.1f h: system MTBF %.2f h, %.1f failures; checkpoint %s in %.1f s every "
                  "%.1f min (optimal %.1f, Young %.1f); lost %.2f h to checkpoints, %.2f h to restarts, %.2f h to "
                  "rework; %.0f useful iterations per hour\n",
                  100 * g.goodput, s.training.duration_s / 3600, g.system_mtbf_s / 3600, g.expected_failures,
                  format_size(static_cast<int64_t>(g.checkpoint_bytes)).c_str(), g.checkpoint_write_s,
                  g.checkpoint_interval_s / 60, g.optimal_interval_s / 60, g.young_interval_s / 60,
                  g.lost_checkpoint_s / 3600, g.lost_restart_s / 3600, g.lost_rework_s / 3600,
                  g.useful_iterations_per_hour);
    out += buf;
  }
  return out;
}

std::string summary_json_line(const RunOutcome& run) {
  const Scenario& s = run.scenario;
  return summary_json({{"name", s.name},
                       {"kind", "training"},
                       {"model", s.model.name},
                       {"cluster", s.cluster.topology_file.empty()
                                       ? s.cluster.node.preset
                                       : std::filesystem::path(s.cluster.topology_file).filename().string()},
                       {"network_model", s.network_model}},
                      run.metrics);
}

}  // namespace clustersim
