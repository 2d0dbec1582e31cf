#include "sim/faults.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <queue>
#include <string>

#include "plan/rng.h"
#include "reports/summary.h"
#include "scenarios/error.h"

namespace clustersim {
namespace {

// Daly's steady state holds over a run of this many checkpoint intervals or more; a shorter
// run's goodput is the mean over this many seeded realizations of its horizon.
constexpr double kSteadyIntervals = 4;
constexpr uint64_t kShortHorizonDraws = 256;

}  // namespace

FaultParams fault_params(const Scenario& s, const Topology& topo) {
  const FaultConfig& f = s.faults;
  FaultParams p;
  p.gpus = topo.num_gpus();
  p.nodes = topo.nodes();
  p.gpus_per_node = topo.gpus_per_node();
  int64_t network_links = 0;
  for (const Link& l : topo.links()) network_links += l.cls == LinkClass::Network;
  p.links = network_links / 2;  // a cable carries both directions
  const double gpu_rate = f.gpu_mtbf_s > 0 ? static_cast<double>(p.gpus) / f.gpu_mtbf_s : 0;
  const double node_rate = f.node_mtbf_s > 0 ? static_cast<double>(p.nodes) / f.node_mtbf_s : 0;
  const double link_rate = f.link_mtbf_s > 0 ? static_cast<double>(p.links) / f.link_mtbf_s : 0;
  const double rate = gpu_rate + node_rate + link_rate;
  p.mtbf_s = rate > 0 ? 1 / rate : 0;
  p.node_share = rate > 0 ? (gpu_rate + node_rate) / rate : 1;
  p.restart_s = f.restart_s;
  p.hot_spares = f.hot_spares;
  p.repair_s = f.repair_s;
  p.trace_s = f.failures_s;
  if (f.checkpoint_size_bytes >= 0) {
    p.checkpoint_bytes = static_cast<double>(f.checkpoint_size_bytes);
  } else {
    // The weights in their stored precision and the optimizer's state (as plan/memory.cc
    // counts them): Adam keeps FP32 master weights and two moments, SGD master and momentum.
    const bool fp32 = s.model.dtype == DType::FP32;
    const double weights = fp32 ? 4 : 2;
    const double optimizer = s.training.optimizer == "adam" ? (fp32 ? 8 : 12) : (fp32 ? 4 : 8);
    p.checkpoint_bytes = static_cast<double>(s.model.total_params()) * (weights + optimizer);
  }
  p.checkpoint_s = p.checkpoint_bytes / f.checkpoint_bandwidth;
  return p;
}

double effective_restart(const FaultParams& p) {
  if (p.hot_spares < 0 || p.mtbf_s <= 0) return p.restart_s;
  // Nodes away for repair when a failure comes: Poisson with mean a; a node-taking
  // failure waits (at most its own node's repair) when K or more are away.
  const double a = p.node_share / p.mtbf_s * p.repair_s;
  double below = 0, term = std::exp(-a);
  for (int64_t k = 0; k < p.hot_spares; ++k) {
    below += term;
    term *= a / static_cast<double>(k + 1);
  }
  const double wait = std::max(0.0, 1 - below);
  return p.restart_s + p.node_share * wait * p.repair_s;
}

double expected_goodput(const FaultParams& p, double interval_s) {
  if (interval_s <= 0) return 0;
  if (p.mtbf_s <= 0) return interval_s / (interval_s + p.checkpoint_s);
  const double m = p.mtbf_s, r = effective_restart(p);
  const double x = (interval_s + p.checkpoint_s) / m;
  if (x + r / m > 700) return 0;  // a segment almost never completes
  return interval_s / (m * std::exp(r / m) * std::expm1(x));
}

double optimal_interval(const FaultParams& p) {
  if (p.mtbf_s <= 0) return 0;
  // G is unimodal in τ: golden-section search on log τ, from far below Young's τ to far above.
  const double young = std::max(young_interval(p), 1e-3);
  double lo = std::log(young / 1000), hi = std::log(young * 1000);
  const double g = (std::sqrt(5.0) - 1) / 2;
  double a = hi - g * (hi - lo), b = lo + g * (hi - lo);
  double fa = expected_goodput(p, std::exp(a)), fb = expected_goodput(p, std::exp(b));
  for (int i = 0; i < 200 && hi - lo > 1e-9; ++i) {
    if (fa < fb) {
      lo = a;
      a = b;
      fa = fb;
      b = lo + g * (hi - lo);
      fb = expected_goodput(p, std::exp(b));
    } else {
      hi = b;
      b = a;
      fb = fa;
      a = hi - g * (hi - lo);
      fa = expected_goodput(p, std::exp(a));
    }
  }
  return std::exp((lo + hi) / 2);
}

double FaultTimeline::goodput() const {
  const double total = useful_s + checkpoint_s + restart_s + lost_s;
  return total > 0 ? useful_s / total : 0;
}

FaultTimeline simulate_faults(const FaultParams& p, double interval_s, double duration_s, uint64_t seed,
                              bool record) {
  FaultTimeline tl;
  auto note = [&](double a, double b, const char* kind, const std::string& part) {
    if (record) tl.events.push_back({a, b, kind, part});
  };
  Rng rng(seed);
  Rng parts(stream_seed(seed, 1));
  const double tau = std::max(interval_s, 1e-9), delta = p.checkpoint_s;
  double next_random = p.mtbf_s > 0 ? rng.exponential(p.mtbf_s) : INFINITY;
  size_t next_trace = 0;
  auto next_failure = [&] {
    const double tr = next_trace < p.trace_s.size() ? p.trace_s[next_trace] : INFINITY;
    return std::min(next_random, tr);
  };
  auto take_failure = [&](double f) -> std::string {
    ++tl.failures;
    if (next_trace < p.trace_s.size() && p.trace_s[next_trace] == f && f <= next_random) {
      ++next_trace;
      return "trace";
    }
    next_random = f + rng.exponential(p.mtbf_s);
    // Which part failed: in proportion to the parts' failure rates (the node share covers
    // GPUs and nodes, in proportion to their counts is what naming needs).
    const double u = parts.uniform();
    if (u >= p.node_share) return "link " + std::to_string(static_cast<int64_t>(parts.uniform() * p.links));
    const int64_t gpu = static_cast<int64_t>(parts.uniform() * static_cast<double>(p.gpus));
    return "gpu " + std::to_string(gpu) + " (node " + std::to_string(gpu / p.gpus_per_node) + ")";
  };
  // Spare nodes, and the times the nodes away for repair come back.
  int64_t spares = p.hot_spares;
  std::priority_queue<double, std::vector<double>, std::greater<>> back;
  double t = 0, segment_start = 0;
  auto fail = [&](double f) {
    // The work since the last checkpoint is lost; the job restarts, waiting for a spare
    // node when the failure took one out and none is left. A failure during the restart
    // starts it again.
    for (;;) {
      const std::string part = take_failure(f);
      note(f, f, "failure", part);
      double wait = 0;
      if (p.hot_spares >= 0 && part.rfind("link", 0) != 0) {
        while (!back.empty() && back.top() <= f) {
          back.pop();
          ++spares;
        }
        if (spares > 0) {
          --spares;
        } else if (!back.empty()) {
          wait = back.top() - f;  // the first node back from repair replaces it
          back.pop();
        } else {
          wait = p.repair_s;  // no spares at all: the node's own repair
        }
        back.push(f + p.repair_s);
      }
      const double end = std::min(duration_s, f + wait + p.restart_s);
      const double nf = next_failure();
      if (nf < end) {
        note(f, nf, "restart", part);
        tl.restart_s += nf - f;
        f = nf;
        continue;
      }
      note(f, end, "restart", part);
      tl.restart_s += end - f;
      t = end;
      segment_start = end;
      return;
    }
  };
  while (t < duration_s) {
    // Compute τ of useful work, then write the checkpoint; a failure in either loses the
    // segment's work.
    const double reach = t + tau;
    const double f = next_failure();
    if (f < reach && f < duration_s) {
      tl.lost_s += f - segment_start;
      note(segment_start, f, "lost", "");
      fail(f);
      continue;
    }
    if (duration_s <= reach) {
      tl.useful_s += duration_s - t;  // unsaved at the end, but done
      break;
    }
    t = reach;
    const double done = t + delta;
    if (f < done && f < duration_s) {
      tl.checkpoint_s += f - t;
      tl.lost_s += tau;
      note(segment_start, t, "lost", "");
      note(t, f, "checkpoint", "");
      fail(f);
      continue;
    }
    tl.useful_s += tau;
    const double end = std::min(done, duration_s);
    tl.checkpoint_s += end - t;
    note(t, end, "checkpoint", "");
    t = end;
    segment_start = end;
  }
  std::stable_sort(tl.events.begin(), tl.events.end(),
                   [](const FaultEvent& a, const FaultEvent& b) { return a.start_s < b.start_s; });
  return tl;
}

GoodputReport goodput_report(const Scenario& s, const Topology& topo, double iteration_s, uint64_t seed,
                             const GoodputDraw& draw) {
  GoodputReport g;
  FaultParams p = fault_params(s, topo);
  const double duration = s.training.duration_s;
  if (duration < iteration_s && draw.sample) return g;  // a draw slower than the duration: no work done
  if (duration < iteration_s) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "training.duration of %.4g s is shorter than one iteration (%.4g s), so no work would be done; "
                  "expected at least one iteration",
                  duration, iteration_s);
    throw InputError(s.mark("training.duration"), buf);
  }
  g.checkpoint_write_s = p.checkpoint_s;
  g.checkpoint_bytes = p.checkpoint_bytes;
  // With a trace alone, the interval is chosen as if its failures came at their mean rate,
  // and that mean gap is the system's MTBF reported (it had read 0).
  FaultParams chooser = p;
  if (chooser.mtbf_s <= 0) chooser.mtbf_s = duration / static_cast<double>(std::max<size_t>(1, p.trace_s.size()));
  g.system_mtbf_s = chooser.mtbf_s;
  g.optimal_interval_s = optimal_interval(chooser);
  g.young_interval_s = young_interval(chooser);
  double tau = s.faults.checkpoint_interval_s > 0 ? s.faults.checkpoint_interval_s : g.optimal_interval_s;
  const double iters = std::max(1.0, std::round(tau / iteration_s));  // a checkpoint comes between iterations
  tau = iters * iteration_s;
  g.checkpoint_interval_s = tau;
  // Work budget: the timeline draws every failure of the run (10^7 expected, as serving's
  // requests; 10^9 whatever the flag).
  if (p.mtbf_s > 0) {
    const double expected = duration / p.mtbf_s;
    char amount[32];
    std::snprintf(amount, sizeof amount, "%.3g", expected);
    if (expected > 1e9 || (!s.allow_large && expected > 1e7))
      throw InputError(
          s.mark("faults"),
          std::string("the run would draw about ") + amount +
              " failures (training.duration over the system's MTBF of " + format_number(p.mtbf_s) + " s), past " +
              (expected > 1e9 ? "1e9, the most any run takes" : "the budget of 1e7 (--allow-large runs it anyway)") +
              ", expected MTBFs of hours");
  }
  g.timeline = simulate_faults(p, tau, duration, seed);
  if (p.trace_s.empty() && p.mtbf_s > 0 && duration >= kSteadyIntervals * tau) {
    // Daly's renewal, split by where a segment's expected time T = M e^{R/M} (e^{L/M} − 1)
    // goes, L = τ + δ: its τ of work and δ of checkpoint, the failed attempts' work
    // M(e^{L/M} − 1) − L, and the restarts after them M(e^{L/M} − 1)(e^{R/M} − 1). As
    // shares of T, which hold where T itself overflows: restarts 1 − e^{−R/M}, rework
    // e^{−R/M} (1 − (L/M) / (e^{L/M} − 1)), the checkpoints δ / T; they sum to 1 − G.
    const double m = p.mtbf_s, r = effective_restart(p), l = tau + p.checkpoint_s;
    g.goodput = expected_goodput(p, tau);
    g.expected_failures = duration / m;
    const double failed = std::expm1(l / m);  // failed attempts per segment (inf past e^709)
    g.lost_restart_s = duration * -std::expm1(-r / m);
    g.lost_rework_s = duration * std::exp(-r / m) * std::max(0.0, 1 - (l / m) / failed);
    g.lost_checkpoint_s = g.goodput * duration / tau * p.checkpoint_s;
  } else if (p.trace_s.empty() && p.mtbf_s > 0) {
    // A run of few intervals is far from the steady state (one shorter than its interval
    // never checkpoints): the expectation over seeded realizations of this horizon.
    g.expected_failures = duration / p.mtbf_s;
    // As many draws as the failures budget allows (1e7 drawn in all for a run), at most 256.
    const double per_draw = std::max(1.0, g.expected_failures);
    const auto draws =
        static_cast<uint64_t>(std::clamp(draw.failure_budget / per_draw, 1.0, static_cast<double>(kShortHorizonDraws)));
    const double n = static_cast<double>(draws);
    for (uint64_t k = 0; k < draws; ++k) {
      const FaultTimeline t =
          k == 0 ? g.timeline : simulate_faults(p, tau, duration, stream_seed(seed, 1000 + k), /*record=*/false);
      g.goodput += t.goodput() / n;
      g.lost_checkpoint_s += t.checkpoint_s / n;
      g.lost_restart_s += t.restart_s / n;
      g.lost_rework_s += t.lost_s / n;
    }
  } else {
    const FaultTimeline& t = g.timeline;
    g.goodput = t.goodput();
    g.expected_failures = static_cast<double>(t.failures);
    g.lost_checkpoint_s = t.checkpoint_s;
    g.lost_restart_s = t.restart_s;
    g.lost_rework_s = t.lost_s;
  }
  g.useful_iterations_per_hour = g.goodput * 3600 / iteration_s;
  return g;
}

}  // namespace clustersim
