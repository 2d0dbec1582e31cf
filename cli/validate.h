// `validate`: a scenario run on GPUs and in the simulator, compared op by op and per
// iteration. Training steps can also be compared with a real run recorded earlier
// (--real-from, the database a validate wrote), which needs neither GPU nor real backend.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "plan/timeline.h"
#include "real_backend/gpu_monitor.h"
#include "reports/summary.h"
#include "scenarios/scenario.h"

namespace clustersim {

// A training step as the real backend ran it: every rank's spans (medians over the
// timed iterations) and the median iteration time.
struct RealRun {
  std::vector<SpanRecord> spans;
  double median_iteration_s = 0;
  std::string device_name;
  std::vector<real::GpuClockSummary> clocks;  // per GPU over the timed iterations; empty when not sampled
  std::string board;                          // the GPUs' model, as the driver names it ("" when not known)
  bool op_events = true;                      // false: timed without events between ops, no spans
};

// The GPUs' sampled SM clock and power as metrics (`sm_clock_mhz`, `sm_clock_max_mhz`,
// `power_w`, `power_limit_w`, `power_capped_fraction`: the first GPU's; nothing when no
// GPU was sampled) and as one line of text ("" when none was).
void add_clock_metrics(const std::vector<real::GpuClockSummary>& clocks, Metrics& m);
std::string clock_line(const std::vector<real::GpuClockSummary>& clocks);
// A real run's rank in its timeline's `ranks.device`: the GPU's slot and its board model
// ("gpu3 (NVIDIA H100 80GB HBM3)"), the slot alone where the model is not known.
std::string real_rank_device(int32_t rank, const std::string& board);

// How validate reaches GPUs; left empty where the build has no real backend.
struct RealHooks {
  std::function<int()> device_count;
  // op_events false: the stream as a framework runs it, iteration times alone (real::RealOptions::op_events).
  std::function<RealRun(const Plan&, int iterations, int warmup, bool op_events)> run_training;
  std::function<int(const Scenario&, int iterations, int warmup, bool json)> run_serving;
};

// The real run recorded in a database written by validate, checked op by op (kind and
// shape) against `plan`; InputError naming the file when it is of another plan.
RealRun read_real_run(const std::string& path, const Plan& plan);

int cmd_validate(const std::vector<std::string>& args, const RealHooks& hooks);
// validate S.yaml --against pytorch (cli/validate_pytorch.cc): the plain-PyTorch step of
// calibrate/pytorch_reference.py on the local GPU against the simulated step. With
// `recorded` (--real-from), the step a reference run stored in that database instead (no
// GPU): its model must be the scenario's.
int validate_against_pytorch(const Scenario& s, int iterations, int warmup, bool json,
                             const std::string& recorded = {});

// The value after the flag args[i], advancing i; std::invalid_argument when there is none
// (the GPU commands' option parsing).
std::string value_of(const std::vector<std::string>& args, size_t& i);

}  // namespace clustersim
