// The layout search's closed-form estimate of one training layout (sim/search.h says how it
// is built): one transformer layer simulated once per shape on the executor, then the
// stages, the pipeline, the exposed gradient reduction and the optimizer step in closed
// form, with the memory `run` would report.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "cost_models/network.h"
#include "plan/training_planner.h"
#include "scenarios/scenario.h"
#include "sim/executor.h"

namespace clustersim {

struct LayoutEstimate {
  double total_s = 0;
  double compute_s = 0;     // m micro-batches of the slowest stage (layers, embedding/logits, sends)
  double bubble_s = 0;      // (p − 1)/v micro-batch times
  double dp_exposed_s = 0;  // gradient reduction not hidden, ZeRO gathers
  double optimizer_s = 0;
  double memory_bytes = 0;  // the fullest stage
};

// The scenario with `l`'s layout in place of its own.
Scenario with_layout(const Scenario& s, const TrainingLayout& l);
std::string describe_layout(const TrainingLayout& l);

class LayoutEstimator {
 public:
  explicit LayoutEstimator(const Scenario& s);
  ~LayoutEstimator();
  // `l` must be a checked layout of the scenario.
  LayoutEstimate estimate(const TrainingLayout& l);
  // The fullest stage's memory, as `run` reports it (peak_memory_per_gpu_bytes).
  double memory_bytes(const TrainingLayout& l) const;

 private:
  struct LayerTimes {
    double forward = 0, backward = 0;              // one layer, one micro-batch (TP/CP/EP communication included)
    double dense_forward = 0, dense_backward = 0;  // a MoE model's leading dense layers (model.moe.dense_layers)
    double first_extra = 0, last_extra = 0;        // embedding (first stage); logits and loss (last stage), fwd + bwd
  };
  const LayerTimes& layer_times(const TrainingLayout& l);
  LayerTimes probe(const Scenario& p);  // kProbeLayers layers of `p`, simulated
  double collective_seconds(CollectiveKind kind, const std::vector<int32_t>& gpus, double bytes);

  const Scenario& s_;
  ExecOptions opt_;
  std::unique_ptr<Topology> topo_;
  std::unique_ptr<AnalyticNetwork> net_;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, bool, std::string, int64_t>, LayerTimes> layers_;
  std::map<std::tuple<int, int32_t, int32_t, size_t, int64_t>, double> colls_;
};

}  // namespace clustersim
