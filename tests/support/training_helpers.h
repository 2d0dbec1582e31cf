// Helpers the training tests share: sums over a plan's ops, an ideal network, and scenarios
// from templates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "plan/training_planner.h"
#include "sim/executor.h"
#include "sim/run.h"
#include "tests/support/temp_scenario.h"

namespace clustersim {

// The bytes of program `program`'s ops of one kind on one group (a collective's of one kind;
// of one layer unless -2; of one phase unless any_phase).
inline double sum_bytes(const Plan& p, size_t program, OpKind kind, GroupKind group, CollectiveKind coll,
                        int32_t layer = -2, Phase phase = Phase::Other, bool any_phase = true) {
  double b = 0;
  for (const Op& op : p.programs[program].ops) {
    if (op.kind != kind || op.group != group) continue;
    if (kind == OpKind::Collective && op.collective != coll) continue;
    if (layer != -2 && op.layer != layer) continue;
    if (!any_phase && op.phase != phase) continue;
    b += static_cast<double>(op.bytes);
  }
  return b;
}

// An ideal network: no protocol latency, full line rate.
inline ExecOptions ideal_network() {
  ExecOptions o;
  for (auto& f : o.network.base_latency) f.fill(0.0);
  for (auto& c : o.network.hop_latency)
    for (auto& f : c) f.fill(0.0);
  o.network.link_efficiency.fill(1.0);
  return o;
}

inline constexpr const char* kTiny = "cluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: gpt3-1.3b, layers: 8}\n";

// `yaml` with each placeholder replaced by its value.
inline std::string filled(std::string yaml, const std::vector<std::pair<std::string, std::string>>& values) {
  for (const auto& [key, value] : values) yaml.replace(yaml.find(key), key.size(), value);
  return yaml;
}

// The simulated iteration time of a training scenario given as text.
inline double iteration_s(const std::string& yaml) {
  RunOptions o;
  o.keep_spans = false;
  o.record_link_usage = false;
  for (const auto& [k, v] : run_training(testing::scenario_from_text(yaml, "fidelity"), o).metrics)
    if (k == "iteration_time_s") return v;
  return 0;
}

// Bytes read and written, and count, of every op of rank 0 named `name`.
struct OpTotals {
  int count = 0;
  double read = 0, written = 0;
};
inline OpTotals op_totals(const TrainingPlan& tp, const std::string& name) {
  OpTotals t;
  for (const Op& op : tp.plan.programs[0].ops)
    if (tp.plan.names[op.name] == name) {
      ++t.count;
      t.read += static_cast<double>(op.bytes_read);
      t.written += static_cast<double>(op.bytes_written);
    }
  return t;
}

}  // namespace clustersim
