// The Timeline: what a run produced, in plain data, for the writers in reports/
// (SQLite, Chrome/Perfetto trace, JSON summary). Executors fill it; writers only read
// it. Times are integer picoseconds, exactly as the engine kept them.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
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

// Bytes a link carried during [start, end).
struct LinkUsage {
  uint32_t link = 0;
  int64_t start_ps = 0;
  int64_t end_ps = 0;
  double bytes = 0;
};

// Link usage as it is recorded: a collective phase loads many links with the same bytes
// over the same interval, so each load holds the interval, the bytes each of its links
// carried, and the links (table link_loads; the view link_usage expands them).
struct LinkLoad {
  int64_t start_ps = 0;
  int64_t end_ps = 0;
  double bytes = 0;    // per link
  uint32_t first = 0;  // its links: LinkLoads::links()[first .. first + count)
  uint32_t count = 0;
};

class LinkLoads {
 public:
  LinkLoads() = default;
  LinkLoads(std::initializer_list<LinkUsage> rows) {
    for (const LinkUsage& u : rows) push_back(u);
  }
  void add(int64_t start_ps, int64_t end_ps, double bytes, std::span<const uint32_t> links) {
    if (links.empty()) return;
    loads_.push_back(
        LinkLoad{start_ps, end_ps, bytes, static_cast<uint32_t>(links_.size()), static_cast<uint32_t>(links.size())});
    links_.insert(links_.end(), links.begin(), links.end());
  }
  // One link's record, joined to the last load when it has the same interval and bytes.
  void push_back(const LinkUsage& u) {
    if (!loads_.empty()) {
      LinkLoad& last = loads_.back();
      if (last.start_ps == u.start_ps && last.end_ps == u.end_ps && last.bytes == u.bytes &&
          last.first + last.count == links_.size()) {
        links_.push_back(u.link);
        ++last.count;
        return;
      }
    }
    const uint32_t one[1] = {u.link};
    add(u.start_ps, u.end_ps, u.bytes, one);
  }
  const std::vector<LinkLoad>& loads() const { return loads_; }
  std::span<const uint32_t> links(const LinkLoad& l) const { return {links_.data() + l.first, l.count}; }
  bool empty() const { return loads_.empty(); }
  size_t records() const { return links_.size(); }  // (link, interval) pairs
  void clear() {
    loads_.clear();
    links_.clear();
  }
  // Every (link, interval) record, load by load.
  template <typename F>
  void each(F&& f) const {
    for (const LinkLoad& l : loads_)
      for (uint32_t k : links(l)) f(LinkUsage{k, l.start_ps, l.end_ps, l.bytes});
  }

 private:
  std::vector<LinkLoad> loads_;
  std::vector<uint32_t> links_;
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
  LinkLoads link_usage;
  // When set, the link usage is this (a run's own record, borrowed for as long as the
  // Timeline lives) instead of `link_usage`: millions of records need no copy.
  const LinkLoads* borrowed_link_usage = nullptr;
  const LinkLoads& usage() const { return borrowed_link_usage ? *borrowed_link_usage : link_usage; }
};

}  // namespace clustersim
