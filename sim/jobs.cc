#include "sim/jobs.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "reports/summary.h"
#include "scenarios/error.h"
#include "sim/executor.h"
#include "sim/run.h"
#include "sim/serving.h"

namespace clustersim {
namespace {

std::string json_string(const std::string& v) { return "\"" + json_escape(v) + "\""; }

// Iterations a short job runs beside the longest at most (the plan grows with them).
constexpr int64_t kMaxRepeats = 64;

struct LoadedJob {
  Scenario s;
  std::vector<int64_t> nodes;  // job node -> shared node
  TrainingPlan plan;           // training jobs
  int64_t repeats = 1;         // iterations it runs in the shared run
  int32_t rank_base = 0;       // its first rank in the merged plan
};

// The job's GPU g (node-major on its own cluster) on the shared cluster.
int32_t shared_gpu(const LoadedJob& j, int32_t g, int gpus_per_node) {
  return static_cast<int32_t>(j.nodes[static_cast<size_t>(g / gpus_per_node)] * gpus_per_node + g % gpus_per_node);
}

// `k` iterations of a plan back to back: every program's ops repeated k times, copy c+1
// waiting (through a join with no kernel) for the last op of every stream of copy c.
// Collectives still match in issue order, so the k-th copy's meet each other.
Plan repeat_plan(const Plan& p, int64_t k) {
  Plan out = p;
  if (k <= 1) return out;
  const uint32_t boundary = out.intern("iteration-boundary");
  for (Program& prog : out.programs) {
    const std::vector<Op> ops = prog.ops;
    const std::vector<uint32_t> deps = prog.deps;
    std::vector<uint32_t> last(prog.streams.size(), UINT32_MAX);
    for (uint32_t i = 0; i < ops.size(); ++i) last[ops[i].stream] = i;
    for (int64_t c = 1; c < k; ++c) {
      const auto base = static_cast<uint32_t>(prog.ops.size());  // copy c's first op, after its join
      const uint32_t prev = base - static_cast<uint32_t>(ops.size());
      Op join{};
      join.kind = OpKind::Memory;
      join.name = boundary;
      join.stream = 0;
      std::vector<uint32_t> ends;
      for (uint32_t l : last)
        if (l != UINT32_MAX) ends.push_back(prev + l);
      const uint32_t j = prog.add(join, ends);
      for (const Op& op : ops) {
        Op c2 = op;
        std::vector<uint32_t> after;
        for (uint32_t d = 0; d < op.dep_count; ++d) after.push_back(deps[op.dep_begin + d] + j + 1);
        if (after.empty()) after.push_back(j);
        prog.add(c2, after);
      }
    }
  }
  return out;
}

// The training jobs' plans as one: ranks, programs and groups renumbered, op names
// re-interned, each rank on its job's GPU of the shared cluster.
Plan merge_plans(std::vector<LoadedJob*>& jobs, int gpus_per_node) {
  Plan m;
  for (LoadedJob* j : jobs) {
    const Plan p = repeat_plan(j->plan.plan, j->repeats);
    j->rank_base = m.world_size;
    const auto program_base = static_cast<uint32_t>(m.programs.size());
    const auto group_base = static_cast<int32_t>(m.groups.size());
    for (const Program& prog : p.programs) {
      Program c = prog;
      for (Op& op : c.ops) op.name = m.intern(p.names[op.name]);
      m.programs.push_back(std::move(c));
    }
    for (const Group& g : p.groups) {
      Group c = g;
      for (int32_t& r : c.ranks) r += j->rank_base;
      m.groups.push_back(std::move(c));
    }
    for (int32_t r = 0; r < p.world_size; ++r) {
      m.rank_program.push_back(p.rank_program[static_cast<size_t>(r)] + program_base);
      m.rank_gpu.push_back(shared_gpu(*j, p.rank_gpu[static_cast<size_t>(r)], gpus_per_node));
      auto groups = p.rank_groups[static_cast<size_t>(r)];
      for (int32_t& g : groups)
        if (g >= 0) g += group_base;
      m.rank_groups.push_back(groups);
      m.mirror_of.push_back(p.mirror_of[static_cast<size_t>(r)] + j->rank_base);
    }
    m.world_size += p.world_size;
  }
  return m;
}

// A job's mean iteration over the iterations it ran.
double job_iteration(const LoadedJob& j, const ExecResult& e) {
  SimTime end = SimTime::zero();
  for (int32_t r = 0; r < j.plan.plan.world_size; ++r)
    end = std::max(end, e.rank_finish[static_cast<size_t>(j.rank_base + r)]);
  return end.seconds() / static_cast<double>(j.repeats) + step_overhead_seconds(j.s);
}

// Mean bytes/s each link carried over the run.
std::vector<double> mean_link_rates(const ExecResult& e, size_t links) {
  std::vector<double> bytes(links, 0.0);
  e.link_usage.each([&](const LinkUsage& u) { bytes[u.link] += u.bytes; });
  const double t = e.makespan.seconds();
  for (double& b : bytes) b = t > 0 ? b / t : 0;
  return bytes;
}

// The links a serving job's KV transfers cross (prefill pool -> decode pool, rank k of
// a prefill replica to rank k of a decode replica) and the mean rate on each.
std::map<uint32_t, double> serving_kv_rates(const LoadedJob& j, const ServingResult& r, Topology& topo, int gpn) {
  std::map<uint32_t, double> rates;
  const InferenceConfig& c = j.s.serving;
  if (c.prefill_replicas + c.decode_replicas == 0) return rates;
  double bytes = 0;
  for (const auto& [k, v] : r.metrics)
    if (k == "kv_transfer_bytes") bytes = v;
  if (bytes <= 0 || r.makespan_s <= 0) return rates;
  const int64_t w = j.s.parallel.tp * j.s.parallel.pp;
  const double share = bytes / r.makespan_s / static_cast<double>(c.prefill_replicas * c.decode_replicas * w);
  for (int64_t p = 0; p < c.prefill_replicas; ++p)
    for (int64_t d = c.prefill_replicas; d < c.prefill_replicas + c.decode_replicas; ++d)
      for (int64_t k = 0; k < w; ++k) {
        const int32_t a = shared_gpu(j, static_cast<int32_t>(p * w + k), gpn);
        const int32_t b = shared_gpu(j, static_cast<int32_t>(d * w + k), gpn);
        for (uint32_t l : topo.route(a, b))
          if (topo.links()[l].cls == LinkClass::Network) rates[l] += share;
      }
  return rates;
}

}  // namespace

JobsOutcome run_jobs(const Scenario& s) {
  const int gpn = s.cluster.node.gpus;
  std::vector<LoadedJob> jobs;
  std::set<int64_t> taken;
  for (const JobSpec& spec : s.jobs) {
    LoadedJob j;
    // A job's file that is not there is the jobs: entry's fault, marked there.
    std::error_code ec;
    if (!std::filesystem::exists(spec.path, ec))
      throw InputError(spec.mark, "job scenario '" + spec.scenario + "' does not exist (looked for " + spec.path +
                                      "), expected a scenario file relative to this file");
    j.s = load_scenario(spec.path);
    if (!j.s.chakra_dir.empty())
      throw InputError(spec.mark, "job " + spec.scenario +
                                      " is a Chakra workload, which a jobs: run does not place, expected a job with "
                                      "model: and parallel:");
    const Scenario& js = j.s;
    if (js.cluster.node.preset != s.cluster.node.preset || js.cluster.node.gpus != gpn)
      throw InputError(spec.mark, "job " + spec.scenario + " runs on " + js.cluster.node.preset + " nodes of " +
                                      std::to_string(js.cluster.node.gpus) + " GPUs, expected the shared cluster's " +
                                      s.cluster.node.preset + " of " + std::to_string(gpn));
    if (!js.jobs.empty() || js.variability.any() || js.faults.set || !js.sweep.empty())
      throw InputError(spec.mark, "job " + spec.scenario +
                                      " has jobs:, variability:, faults: or sweep:, expected a plain training or "
                                      "serving scenario");
    // What the shared cluster decides is the jobs: file's: a job's own would be ignored.
    for (const auto& [key, mark] : js.marks) {
      const bool cluster_own =
          key == "cluster" || key == "cluster.preset" || key == "cluster.nodes" || key == "cluster.gpus_per_node";
      const bool shared = (key.rfind("cluster.", 0) == 0 && !cluster_own) || key == "calibration" ||
                          key == "collectives" || key.rfind("collectives.", 0) == 0 || key == "network_model" ||
                          key == "output" || key.rfind("output.", 0) == 0;
      if (shared)
        throw InputError(mark, key + " in job " + spec.scenario +
                                   ": the shared cluster's fabric, profile, collectives and network model are the "
                                   "jobs: file's, and a jobs: run writes no output: files, expected it there or not "
                                   "at all");
    }
    if (!spec.nodes.empty()) {
      if (static_cast<int64_t>(spec.nodes.size()) != js.cluster.nodes)
        throw InputError(spec.mark, "job " + spec.scenario + " lists " + std::to_string(spec.nodes.size()) +
                                        " nodes, expected its cluster.nodes = " + std::to_string(js.cluster.nodes));
      j.nodes = spec.nodes;
    } else {
      for (int64_t n = 0; n < js.cluster.nodes; ++n) j.nodes.push_back(spec.first_node + n);
    }
    std::set<int64_t> mine;
    for (int64_t n : j.nodes) {
      if (!mine.insert(n).second)
        throw InputError(spec.mark, "job " + spec.scenario + " lists node " + std::to_string(n) +
                                        " twice, expected each of its nodes once");
      if (n >= s.cluster.nodes)
        throw InputError(spec.mark, "job " + spec.scenario + " needs node " + std::to_string(n) +
                                        ", past the shared cluster's " + std::to_string(s.cluster.nodes) + " nodes");
      if (!taken.insert(n).second)
        throw InputError(spec.mark, "job " + spec.scenario + " takes node " + std::to_string(n) +
                                        ", which another job already has");
    }
    jobs.push_back(std::move(j));
  }

  ExecOptions eo;
  apply_calibration(s, eo.compute, eo.network);
  collective_options(s, eo);
  eo.keep_spans = false;
  eo.record_link_usage = true;
  Topology topo(s.cluster);

  JobsOutcome out;
  std::vector<LoadedJob*> training;
  std::vector<ServingResult> serving_alone(jobs.size());
  std::map<uint32_t, double> background;  // bytes/s serving jobs put on shared links
  for (size_t i = 0; i < jobs.size(); ++i) {
    LoadedJob& j = jobs[i];
    JobOutcome o;
    // Two jobs of one name (one scenario placed twice) are told apart by their place.
    o.name = j.s.name;
    int64_t same = 0;
    for (size_t k = 0; k < i; ++k) same += jobs[k].s.name == j.s.name;
    bool later = false;
    for (size_t k = i + 1; k < jobs.size() && !later; ++k) later = jobs[k].s.name == j.s.name;
    if (same > 0 || later) o.name += " #" + std::to_string(same + 1);
    o.scenario = s.jobs[i].scenario;
    o.nodes = j.nodes;
    if (j.s.inference) {
      o.kind = "serving";
      o.metric = "e2e_s_p50";
      serving_alone[i] = run_serving(j.s);
      for (const auto& [k, v] : serving_alone[i].metrics)
        if (k == o.metric) o.alone = v;
      for (auto [l, r] : serving_kv_rates(j, serving_alone[i], topo, gpn)) background[l] += r;
    } else {
      o.kind = "training";
      o.metric = "iteration_time_s";
      j.plan = build_training_plan(j.s);
      training.push_back(&j);
    }
    out.jobs.push_back(o);
  }
  // Each training job alone at its placement, then all of them together.
  std::vector<double> training_rates(topo.links().size(), 0.0);
  if (!training.empty()) {
    for (size_t i = 0, t = 0; i < jobs.size(); ++i) {
      if (jobs[i].s.inference) continue;
      std::vector<LoadedJob*> one = {training[t++]};
      const Plan alone_plan = merge_plans(one, gpn);
      // A job's slowest board is among its own GPUs, not the whole cluster's.
      ExecOptions alone_eo = eo;
      alone_eo.compute.slowest_board = slowest_board(s, one[0]->s.gpus());
      const ExecResult e = execute_plan(alone_plan, topo, alone_eo);
      out.jobs[i].alone = job_iteration(*one[0], e);
      out.jobs[i].alone_exposed_comm_s = e.exposed_comm_s;
    }
    // A shorter job keeps iterating while the longest one runs, so the contention is that
    // of jobs in steady state, not of one iteration each.
    double longest = 0;
    for (const JobOutcome& j : out.jobs)
      if (j.kind == "training") longest = std::max(longest, j.alone);
    for (size_t i = 0, t = 0; i < jobs.size(); ++i) {
      if (jobs[i].s.inference) continue;
      LoadedJob& j = *training[t++];
      j.repeats = std::clamp<int64_t>(std::llround(longest / out.jobs[i].alone), 1, kMaxRepeats);
      out.jobs[i].iterations = j.repeats;
    }
    const Plan merged = merge_plans(training, gpn);
    std::vector<double> nominal;
    for (const Link& l : topo.links()) nominal.push_back(l.bandwidth);
    for (auto [l, rate] : background) topo.set_link_bandwidth(l, std::max(0.05 * nominal[l], nominal[l] - rate));
    // A job's boards are its own GPUs': the merged run is priced at each training job's own
    // slowest board, once per distinct factor (jobs of one size share a run), and each job
    // takes its time from the run priced for it. The fabric's mean load comes from the run of
    // the largest job, whose boards are the slowest.
    int64_t largest = 0;
    for (const LoadedJob* j : training) largest = std::max(largest, j->s.gpus());
    std::map<int64_t, size_t> sizes;  // GPUs of a job -> its run, in increasing size
    for (const LoadedJob* j : training) sizes.emplace(j->s.gpus(), 0);
    for (auto& [gpus, unused] : sizes) {
      (void)unused;
      ExecOptions shared_eo = eo;
      shared_eo.compute.slowest_board = slowest_board(s, gpus);
      const ExecResult e = execute_plan(merged, topo, shared_eo);
      if (gpus == largest) {
        training_rates = mean_link_rates(e, topo.links().size());
        out.simulated_ranks = static_cast<int64_t>(e.simulated_ranks.size());
      }
      out.events += static_cast<int64_t>(e.events);
      for (size_t i = 0, t = 0; i < jobs.size(); ++i) {
        if (jobs[i].s.inference) continue;
        const LoadedJob& j = *training[t++];
        if (j.s.gpus() != gpus) continue;
        out.jobs[i].shared = job_iteration(j, e);
        // The exposed communication of the shared run is a mean over all jobs' simulated
        // ranks; per job, it is the iteration's growth on top of the job's own exposure.
        out.jobs[i].shared_exposed_comm_s = out.jobs[i].alone_exposed_comm_s + out.jobs[i].shared - out.jobs[i].alone;
      }
    }
    for (auto [l, rate] : background) topo.set_link_bandwidth(l, nominal[l]);
  }
  // Serving jobs lose what the training jobs' mean rate takes of their KV links.
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (!jobs[i].s.inference) continue;
    double share = 1;
    for (auto [l, rate] : serving_kv_rates(jobs[i], serving_alone[i], topo, gpn))
      share = std::min(share, std::max(0.05, 1 - training_rates[l] / topo.links()[l].bandwidth));
    if (share < 1) {
      Scenario js = jobs[i].s;
      js.serving.fabric_share = share;
      for (const auto& [k, v] : run_serving(js).metrics)
        if (k == out.jobs[i].metric) out.jobs[i].shared = v;
    } else {
      out.jobs[i].shared = out.jobs[i].alone;
    }
  }
  return out;
}

std::string jobs_summary_table(const Scenario& s, const JobsOutcome& o) {
  std::string out = "jobs on " + std::to_string(s.cluster.nodes) + " x " + s.cluster.node.preset + " (" +
                    std::string(to_string(s.cluster.fabric.kind)) + " fabric, " + s.network_model + " network)\n";
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-32s %-9s %-11s %-17s %12s %12s %9s\n", "job", "kind", "nodes", "metric", "alone",
                "shared", "slowdown");
  out += buf;
  for (const JobOutcome& j : o.jobs) {
    bool contiguous = true;
    for (size_t n = 1; n < j.nodes.size(); ++n) contiguous &= j.nodes[n] == j.nodes[n - 1] + 1;
    std::string nodes;
    if (contiguous && j.nodes.size() > 1)
      nodes = std::to_string(j.nodes.front()) + ".." + std::to_string(j.nodes.back());
    else
      for (size_t n = 0; n < j.nodes.size(); ++n) nodes += (n ? "," : "") + std::to_string(j.nodes[n]);
    std::snprintf(buf, sizeof buf, "%-32s %-9s %-11s %-17s %12.6f %12.6f %8.3fx\n", j.name.c_str(), j.kind.c_str(),
                  nodes.c_str(), j.metric.c_str(), j.alone, j.shared, j.slowdown());
    out += buf;
  }
  return out;
}

std::string jobs_summary_json(const Scenario& s, const JobsOutcome& o) {
  std::string out = "{\"name\": " + json_string(s.name) + ", \"kind\": \"jobs\", \"network_model\": " +
                    json_string(s.network_model) + ", \"jobs\": [";
  for (size_t i = 0; i < o.jobs.size(); ++i) {
    const JobOutcome& j = o.jobs[i];
    std::string nodes;
    for (size_t n = 0; n < j.nodes.size(); ++n) nodes += (n ? ", " : "") + std::to_string(j.nodes[n]);
    out += std::string(i ? ", " : "") + "{\"name\": " + json_string(j.name) + ", \"scenario\": " +
           json_string(j.scenario) + ", \"kind\": " + json_string(j.kind) + ", \"nodes\": [" + nodes +
           "], \"metric\": " + json_string(j.metric) + ", \"alone\": " + format_number(j.alone) +
           ", \"shared\": " + format_number(j.shared) + ", \"slowdown\": " + format_number(j.slowdown()) +
           ", \"iterations\": " + std::to_string(j.iterations) + "}";
  }
  return out + "]}";
}

}  // namespace clustersim
