// Layout search: the fastest valid training layout for the scenario's model, cluster and
// global batch. Every combination of tp, pp, cp, ep (MoE), micro-batch, schedule
// (1f1b, interleaved-1f1b with its virtual stages), ZeRO stage, recompute and sequence
// parallelism is enumerated; layouts that do not divide or do not fit in memory (the
// planner's own checks and memory model) are pruned; the rest are ranked by a closed-form
// estimate built from the same cost models; the best K — and the scenario's own layout,
// as the baseline — are then simulated op by op (on the scenario's network model, or the
// one SearchOptions::refine names), and the fastest simulated layout wins.
//
// The estimate: one transformer layer's forward and backward are simulated once per
// (tp, cp, ep, micro-batch, sequence parallelism, recompute) on the executor (a one-layer
// plan, analytic network); a stage's micro-batch costs its layers' times plus its share
// of embedding / logits and its pipeline sends; the pipeline takes
// (m + (p − 1)/v) micro-batch times; gradient reduction (all-reduce, or ZeRO's
// reduce-scatter + all-gather) is costed on the actual DP group's GPUs and only its part
// not hidden behind the last backward counts; the optimizer step is a memory-bound pass.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "plan/training_planner.h"
#include "scenarios/scenario.h"
#include "sim/layout_estimator.h"
#include "topology/topology.h"

namespace clustersim {

struct SearchOptions {
  int top_k = 8;                // layouts simulated op by op after the estimate
  int jobs = 1;                 // threads for those simulations
  std::string refine;           // network model of the simulations: flow | analytic ("": the scenario's own)
  bool progress = true;
};

struct SearchCandidate {
  TrainingLayout layout;
  LayoutEstimate estimate;
  bool simulated = false;
  double simulated_s = 0;  // the executor's iteration time
  double mfu = 0;
  double bubble_fraction = 0, exposed_comm_s = 0, peak_memory_bytes = 0;
  bool baseline = false;  // the scenario's own layout
  std::string settings;   // the --set pairs that run it (candidate_settings)
};

struct SearchResult {
  std::string name;
  int64_t enumerated = 0;      // layouts generated
  int64_t invalid = 0;         // refused by the planner's checks
  std::string invalid_reason;  // the checks' most frequent refusal (the first of equals), "" when none
  int64_t invalid_reason_count = 0;
  int64_t over_memory = 0;     // pruned by the memory model
  int64_t estimated = 0;       // ranked by the estimate
  double estimate_wall_s = 0;  // wall time of enumeration + estimates
  double refine_wall_s = 0;
  std::string network_model;         // the one the candidates were simulated on
  std::vector<SearchCandidate> top;  // simulated, fastest first
  int best = -1;                     // index into top
  int baseline = -1;                 // index into top, when the scenario's layout is valid
  std::string baseline_reason;       // why the scenario's own layout is not a candidate
};

// Throws InputError for a scenario that cannot be searched (inference, no global batch).
SearchResult search_layouts(const Scenario& s, const SearchOptions& opt);
std::string search_table(const SearchResult& r);
// The wall-clock times of the two passes, for stderr (not part of the result's bytes).
std::string search_timing(const SearchResult& r);
std::string search_json(const SearchResult& r);
// The class of a check's refusal: its message with each number (digits, with their points
// and thousands commas) as '#', so the same check refused at other numbers counts once.
std::string refusal_class(const std::string& message);
// A candidate as the --set pairs that run it ("parallel.dp=8, parallel.tp=4, ..."): the layout
// and whatever else search changed in the scenario `s` to simulate it (the end stages' sizes,
// the micro-batch group, ZeRO 3's choices where ZeRO 3 is not the candidate's, a null for a
// key back at its default) and the network model, so that `clustersim run S.yaml --set ...`
// simulates that candidate again.
std::string candidate_settings(const Scenario& s, const TrainingLayout& l, const std::string& network_model);
// One candidate as the JSON object --json prints: its layout, simulated and estimated times.
std::string candidate_json(const SearchCandidate& c);

}  // namespace clustersim
