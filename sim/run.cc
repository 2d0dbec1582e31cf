#include "sim/run.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <set>
#include <unordered_map>
#include <vector>

#include "calibrate/profile.h"
#include "cost_models/power_cap.h"
#include "plan/chakra.h"
#include "plan/rng.h"
#include "reports/progress.h"
#include "scenarios/units.h"
#include "sim/parallel.h"

namespace clustersim {

namespace fs = std::filesystem;

void collective_options(const Scenario& s, ExecOptions& eo) {
  if (s.algorithm != "auto") {
    Algorithm a;
    parse_algorithm(s.algorithm, a);  // the loader accepted only known names
    eo.algorithm = a;
  }
  if (s.protocol != "auto") {
    Protocol p;
    parse_protocol(s.protocol, p);
    eo.protocol = p;
  }
  eo.flow = s.network_model == "flow";
}

void apply_calibration(const Scenario& s, ComputeProfile& compute, NetworkProfile& network) {
  if (!s.calibration.empty()) {
    const CalibrationProfile prof = load_profile(s.calibration, s.mark("calibration"));
    if (const std::string w = profile_warning(prof); !w.empty()) {
      static std::atomic<bool> said{false};
      if (!said.exchange(true)) std::cerr << s.mark("calibration").str() << ": " << w << "\n";
    }
    if (const std::string w = profile_gpu_warning(prof, s.cluster.node.gpu.name); !w.empty()) {
      static std::atomic<bool> said{false};
      if (!said.exchange(true)) std::cerr << s.mark("calibration").str() << ": " << w << "\n";
    }
    compute = prof.compute;
    network = prof.network;
  }
  // The Triton kernel does FlashAttention-2's work at its own rate (ComputeProfile::triton_attention).
  compute.flash2 = s.training.attention == "flash2" || s.training.attention == "triton";
  compute.triton_attention = s.training.attention == "triton";
  compute.power_cap = s.power_cap;
  compute.slowest_board = slowest_board(s);
}

double slowest_board(const Scenario& s) {
  // The GPUs that meet at the job's collectives: a serving replica's, or every GPU of a
  // training job (its DP, TP, PP and CP groups chain them all within a step).
  return slowest_board(s, s.inference ? s.parallel.tp * s.parallel.pp : s.gpus());
}

double slowest_board(const Scenario& s, int64_t meet) {
  return std::max(0.05, 1.0 - s.board_spread * expected_max_normal(meet));
}

double plan_board(const Scenario& s, const Plan& plan) {
  // A Chakra workload's GPUs are its traces' ranks, not the cluster's.
  return s.chakra_dir.empty() ? slowest_board(s) : slowest_board(s, plan.world_size);
}

double step_overhead_seconds(const Scenario& s) {
  return s.training.step_overhead_set ? s.training.step_overhead_s : kDefaultStepOverheadS;
}

namespace {

ExecOptions base_exec_options(const Scenario& s, const RunOptions& opt) {
  ExecOptions eo;
  apply_calibration(s, eo.compute, eo.network);
  collective_options(s, eo);
  eo.simulate_all_ranks = opt.simulate_all_ranks;
  eo.record_link_usage = opt.record_link_usage;
  eo.keep_spans = opt.keep_spans;
  eo.solo_steps = opt.solo_steps;
  eo.timed_kernels = opt.timed_kernels;
  if (!opt.attention_dropout) {
    eo.compute.attention_dropout_ops = eo.compute.flash2_dropout_ops = {0, 0};
    eo.compute.dropout_rng_ops_per_element = 0;
    // Nor does it broadcast inside a non-vectorized loop: its memory kernels stream.
    eo.compute.broadcast_loop_ops_per_element = 0;
  }
  if (s.training.launch_blocking) eo.blocking_launch_s = eo.compute.blocking_launch_s;
  return eo;
}

// Puts a draw into the executor's options and the topology's links.
void apply_draw(const VariabilityDraw& d, Topology& topo, ExecOptions& eo) {
  for (auto [id, bw] : d.link_bandwidth) topo.set_link_bandwidth(id, bw);
  eo.rank_slowdown = d.rank_slowdown;
  eo.kernel_jitter = d.kernel_jitter;
  eo.jitter_seed = d.jitter_seed;
}

// The iteration's wall time: the last kernel, then the host's work per step that the GPUs
// wait for (training.step_overhead).
double iteration_seconds(const Scenario& s, const ExecResult& e) {
  return e.makespan.seconds() + step_overhead_seconds(s);
}

double tokens_per_iteration(const Scenario& s, const TrainingPlan& p) {
  return static_cast<double>(p.layout.global_batch * s.model.seq_len);
}

double mfu_of(const Scenario& s, const TrainingPlan& p, double iter) {
  return p.model_flops_per_rank / iter / mean_peak_flops(s.cluster, s.model.dtype);
}

// A seed for the fault timeline of sample i (apart from its variability draw's).
uint64_t fault_seed(const Scenario& s, int64_t sample) {
  return stream_seed(stream_seed(s.seed, static_cast<uint64_t>(sample)), 1000);
}

void add_goodput_metrics(Metrics& m, const GoodputReport& g) {
  m.emplace_back("goodput", g.goodput);
  m.emplace_back("checkpoint_interval_s", g.checkpoint_interval_s);
  m.emplace_back("optimal_checkpoint_interval_s", g.optimal_interval_s);
  m.emplace_back("young_checkpoint_interval_s", g.young_interval_s);
  m.emplace_back("checkpoint_write_s", g.checkpoint_write_s);
  m.emplace_back("checkpoint_bytes", std::round(g.checkpoint_bytes));
  m.emplace_back("system_mtbf_s", g.system_mtbf_s);
  m.emplace_back("expected_failures", g.expected_failures);
  m.emplace_back("useful_iterations_per_hour", g.useful_iterations_per_hour);
  m.emplace_back("lost_checkpoint_s", g.lost_checkpoint_s);
  m.emplace_back("lost_restart_s", g.lost_restart_s);
  m.emplace_back("lost_rework_s", g.lost_rework_s);
}

}  // namespace

TrainingPlan scenario_plan(const Scenario& s, const PlannerOptions& opt) {
  if (s.chakra_dir.empty()) return build_training_plan(s, opt);
  // A workload from Chakra traces: FLOPs are what its kernels and compute nodes declare;
  // there is no model to count tokens or memory from.
  TrainingPlan tp;
  tp.plan = plan_from_chakra(s.chakra_dir, s.cluster.node.gpu);
  if (tp.plan.world_size > s.gpus())
    throw InputError(s.mark("workload.chakra"), std::to_string(tp.plan.world_size) +
                                                    " traces need as many GPUs, the cluster has " +
                                                    std::to_string(s.gpus()));
  tp.model_flops_per_rank = tp.hardware_flops_per_rank = chakra_flops_per_rank(tp.plan);
  tp.layout.dp = tp.plan.world_size;
  tp.layout.global_batch = 0;  // no tokens: tokens_per_s is 0
  return tp;
}

RunOutcome run_training(const Scenario& s, const RunOptions& opt) {
  RunOutcome out;
  out.scenario = s;
  ExecOptions eo = base_exec_options(s, opt);
  out.topology = std::make_unique<Topology>(s.cluster);
  PlannerOptions po;
  po.check_memory = opt.check_memory;
  out.plan = scenario_plan(s, po);
  eo.compute.slowest_board = plan_board(s, out.plan.plan);
  if (s.variability.any()) {
    out.variability = draw_variability(s, out.plan.plan, *out.topology, stream_seed(s.seed, 0), opt.simulate_all_ranks);
    apply_draw(out.variability, *out.topology, eo);
  }
  std::unique_ptr<Progress> bar;
  if (opt.progress) {
    bar = std::make_unique<Progress>("simulating", 0);
    eo.progress = [&](uint64_t done, uint64_t total) {
      bar->update(static_cast<int64_t>(done), static_cast<int64_t>(total));
    };
  }
  out.exec = execute_plan(out.plan.plan, *out.topology, eo);
  if (bar) bar->finish();

  const TrainingLayout& l = out.plan.layout;
  const double iter = iteration_seconds(s, out.exec);
  const double gpus = static_cast<double>(s.gpus());
  const double tokens = tokens_per_iteration(s, out.plan);
  const double tflops = out.plan.model_flops_per_rank / iter / 1e12;
  const auto& ex = out.exec.exposed_comm_by_kind;
  out.metrics = {
      {"iteration_time_s", iter},
      {"iterations", static_cast<double>(s.training.iterations)},
      {"total_time_s", iter * static_cast<double>(s.training.iterations)},
      {"tokens_per_s", tokens / iter},
      {"tflops_per_gpu", tflops},
      {"hardware_tflops_per_gpu", out.plan.hardware_flops_per_rank / iter / 1e12},
      {"mfu", mfu_of(s, out.plan, iter)},
      {"bubble_fraction", out.exec.bubble_s / iter},
      {"bubble_s", out.exec.bubble_s},
      {"exposed_comm_s", out.exec.exposed_comm_s},
      {"exposed_comm_tp_s", ex[static_cast<size_t>(GroupKind::TP)]},
      {"exposed_comm_dp_s", ex[static_cast<size_t>(GroupKind::DP)] + ex[static_cast<size_t>(GroupKind::EDP)]},
      {"exposed_comm_pp_s", ex[static_cast<size_t>(GroupKind::PP)]},
      {"exposed_comm_cp_s", ex[static_cast<size_t>(GroupKind::CP)]},
      {"exposed_comm_ep_s", ex[static_cast<size_t>(GroupKind::EP)]},
      {"compute_busy_s", out.exec.compute_busy_s},
      {"power_clock", out.exec.power_clock},
      {"slowest_board", eo.compute.slowest_board},
      // Whole bytes: the memory model's formulas carry fractions of one.
      {"peak_memory_per_gpu_bytes", std::round(out.plan.memory.total())},
      {"memory_weights_bytes", std::round(out.plan.memory.weights)},
      {"memory_gradients_bytes", std::round(out.plan.memory.gradients)},
      {"memory_optimizer_bytes", std::round(out.plan.memory.optimizer)},
      {"memory_activations_bytes", std::round(out.plan.memory.activations)},
      {"memory_buffers_bytes", std::round(out.plan.memory.buffers)},
      {"memory_reserved_bytes", std::round(out.plan.memory.reserved)},
      {"gpus", gpus},
      {"dp", static_cast<double>(l.dp)},
      {"tp", static_cast<double>(l.tp)},
      {"pp", static_cast<double>(l.pp)},
      {"cp", static_cast<double>(l.cp)},
      {"ep", static_cast<double>(l.ep)},
      {"virtual_stages", static_cast<double>(l.virtual_stages)},
      {"zero_stage", static_cast<double>(l.zero_stage)},
      {"micro_batches", static_cast<double>(l.micro_batches)},
      {"global_batch", static_cast<double>(l.global_batch)},
      {"simulated_ranks", static_cast<double>(out.exec.simulated_ranks.size())},
      {"events", static_cast<double>(out.exec.events)},
  };
  // A workload of Chakra traces has no layout the simulator chose (the importer's placeholder
  // would read as dp = ranks, tp = pp = 1): those fields are left out.
  if (!s.chakra_dir.empty())
    std::erase_if(out.metrics, [](const auto& kv) {
      static const std::set<std::string> kLayout = {
          "dp", "tp", "pp", "cp", "ep", "zero_stage", "virtual_stages", "micro_batches", "global_batch"};
      return kLayout.count(kv.first) > 0;
    });
  if (s.model.moe.routing.dist != "even") out.metrics.emplace_back("moe_hot_rank_load", out.plan.moe_hot_rank_load);
  if (!s.model.blocks.empty())  // no tokens: samples (images, proteins) per second
    out.metrics.emplace_back("samples_per_s", static_cast<double>(l.global_batch) / iter);
  if (!s.cluster.one_gpu_model()) {
    // Mixed GPU models: each pipeline stage's compute, where the slower GPUs show.
    const Plan& plan = out.plan.plan;
    for (int64_t st = 0; st < l.pp; ++st) {
      double busy = 0;
      for (int32_t r : out.exec.simulated_ranks)
        if (plan.rank_program[static_cast<size_t>(r)] == static_cast<uint32_t>(st))
          busy = std::max(busy, out.exec.rank_compute_busy_s[static_cast<size_t>(r)]);
      out.metrics.emplace_back("stage_" + std::to_string(st) + "_compute_busy_s", busy);
    }
  }
  if (s.variability.any()) {
    const auto& g = out.variability.gpu_slowdown;
    out.metrics.emplace_back("slowest_gpu_slowdown", g.empty() ? 1.0 : *std::max_element(g.begin(), g.end()));
  }
  if (s.faults.set) {
    out.goodput = goodput_report(s, *out.topology, iter, fault_seed(s, 0));
    add_goodput_metrics(out.metrics, *out.goodput);
  }
  return out;
}

double quantile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = p * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

void run_samples(RunOutcome& run, int64_t n, int jobs, const RunOptions& opt) {
  const Scenario& s = run.scenario;
  n = std::max<int64_t>(1, n);
  std::vector<std::string> keys = {"iteration_time_s", "mfu", "tokens_per_s"};
  if (s.faults.set) keys.push_back("goodput");
  std::vector<std::vector<double>> values(keys.size(), std::vector<double>(static_cast<size_t>(n)));
  auto metric = [&](const char* k) {
    for (const auto& [key, v] : run.metrics)
      if (key == k) return v;
    return 0.0;
  };
  for (size_t k = 0; k < keys.size(); ++k) values[k][0] = metric(keys[k].c_str());
  RunOptions quiet = opt;
  quiet.record_link_usage = false;
  quiet.keep_spans = false;
  ExecOptions base = base_exec_options(s, quiet);
  base.compute.slowest_board = plan_board(s, run.plan.plan);  // as draw 0 ran
  bool links_vary = s.variability.link_speed.dist != "none";
  for (const Straggler& st : s.variability.stragglers) links_vary |= st.kind == "link";
  if (!links_vary) base.collective_cache = make_collective_cache();
  struct Worker {
    std::unique_ptr<Topology> topo;
    std::vector<double> nominal;  // link bandwidths before a draw changes them
  };
  parallel_for(
      1, n, jobs,
      [&] {
        Worker w{std::make_unique<Topology>(s.cluster), {}};
        for (const Link& l : w.topo->links()) w.nominal.push_back(l.bandwidth);
        return w;
      },
      [&](Worker& w, int64_t i) {
        Topology& topo = *w.topo;
        const uint64_t seed = stream_seed(s.seed, static_cast<uint64_t>(i));
        ExecOptions eo = base;
        const VariabilityDraw d = draw_variability(s, run.plan.plan, topo, seed, opt.simulate_all_ranks);
        apply_draw(d, topo, eo);
        const ExecResult e = execute_plan(run.plan.plan, topo, eo);
        for (auto [id, bw] : d.link_bandwidth) topo.set_link_bandwidth(id, w.nominal[id]);
        const double iter = iteration_seconds(s, e);
        const auto at = static_cast<size_t>(i);
        values[0][at] = iter;
        values[1][at] = mfu_of(s, run.plan, iter);
        values[2][at] = tokens_per_iteration(s, run.plan) / iter;
        if (s.faults.set) {
          GoodputDraw d;  // the draws share one run's budget of failures drawn
          d.sample = true;
          d.failure_budget = 1e7 / static_cast<double>(n);
          values[3][at] = goodput_report(s, topo, iter, fault_seed(s, i), d).goodput;
        }
      });
  run.samples.clear();
  add_sample_statistics(keys, values, s.seed, run.metrics, run.samples);
}

void add_sample_statistics(const std::vector<std::string>& keys, const std::vector<std::vector<double>>& values,
                           uint64_t seed, Metrics& m, std::vector<SampleValue>& out) {
  const size_t n = values.empty() ? 0 : values[0].size();
  for (size_t i = 0; i < n; ++i)
    for (size_t k = 0; k < keys.size(); ++k) out.push_back(SampleValue{static_cast<int64_t>(i), stream_seed(seed, i), keys[k], values[k][i]});
  m.emplace_back("samples", static_cast<double>(n));
  for (size_t k = 0; k < keys.size(); ++k) {
    double sum = 0;
    for (double v : values[k]) sum += v;
    m.emplace_back(keys[k] + "_p5", quantile(values[k], 0.05));
    m.emplace_back(keys[k] + "_p50", quantile(values[k], 0.50));
    m.emplace_back(keys[k] + "_p95", quantile(values[k], 0.95));
    m.emplace_back(keys[k] + "_mean", sum / static_cast<double>(n));
  }
}

}  // namespace clustersim
