// The Timeline: what a run produced, in plain data, for the writers in reports/
// (SQLite, Chrome/Perfetto trace, JSON summary). Executors fill it; writers only read
// it. Times are integer picoseconds, exactly as the engine kept them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "plan/plan.h"

namespace clustersim {

struct RankInfo {
  int32_t rank = 0;
  int32_t node = 0;
  int32_t local_gpu = 0;  // index of the GPU inside its node
  std::string device;     // topology vertex name, e.g. "node3/gpu5"
  uint32_t program = 0;
  int32_t mirror_of = 0;  // representative rank whose spans stand for this one
};

struct LinkInfo {
  uint32_t id = 0;
  std::string src, dst;  // topology vertex names
  std::string kind;      // "nvlink", "pcie", "network"
  double bandwidth_Bps = 0;
  double latency_s = 0;
};

struct SpanRecord {
  int32_t rank = 0;
  uint8_t stream = 0;
  uint32_t op = 0;  // index into the rank's program
  int64_t start_ps = 0;
  int64_t end_ps = 0;
};

// Bytes a link carried during [start, end): one row per link per collective phase.
struct LinkUsage {
  uint32_t link = 0;
  int64_t start_ps = 0;
  int64_t end_ps = 0;
  double bytes = 0;
};

// One value of one seeded draw of `run --samples N` (table `samples`).
struct SampleValue {
  int64_t sample = 0;
  uint64_t seed = 0;
  std::string key;
  double value = 0;
};

// A span of the fault timeline over the job's wall-clock duration (table `faults`):
// failure (an instant), restart, checkpoint, or lost (work done since the last
// checkpoint, thrown away by a failure).
struct FaultSpan {
  double start_s = 0, end_s = 0;
  std::string kind, component;
};

struct RunInfo {
  std::string name;
  std::string source = "sim";     // 'sim' | 'real'
  std::string kind = "training";  // 'training' | 'collective'
  std::string network_model;
  std::string scenario_yaml;  // the merged scenario, as the run saw it
  uint64_t seed = 0;
  std::vector<std::pair<std::string, double>> metrics;  // the summary, in a fixed order
  std::vector<SampleValue> samples;                     // run --samples N
  std::vector<FaultSpan> faults;                        // with faults:
};

struct Timeline {
  RunInfo run;
  const Plan* plan = nullptr;
  std::vector<RankInfo> ranks;
  std::vector<LinkInfo> links;
  std::vector<SpanRecord> spans;
  std::vector<LinkUsage> link_usage;
  // When set, the link usage is this (a run's own record, borrowed for as long as the
  // Timeline lives) instead of `link_usage`: millions of records need no copy.
  const std::vector<LinkUsage>* borrowed_link_usage = nullptr;
  const std::vector<LinkUsage>& usage() const { return borrowed_link_usage ? *borrowed_link_usage : link_usage; }
};

}  // namespace clustersim
