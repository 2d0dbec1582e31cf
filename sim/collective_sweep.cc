#include "sim/collective_sweep.h"

#include <cstdio>

#include "cost_models/network.h"
#include "reports/summary.h"
#include "sim/time.h"

namespace clustersim {

std::vector<CollectiveRow> run_collective_sweep(const CollectiveSweepConfig& cfg) {
  ClusterSpec spec = cfg.cluster;
  spec.nodes = cfg.nodes;
  spec.node.gpus = cfg.gpus / cfg.nodes;
  Topology topo(spec);
  AnalyticNetwork net(topo);
  std::vector<int32_t> gpus;
  for (int g = 0; g < cfg.gpus; ++g) gpus.push_back(g);
  std::vector<CollectiveRow> rows;
  for (int64_t b = cfg.min_bytes; b <= cfg.max_bytes; b *= cfg.step_factor) {
    CollectiveCost c = net.run(expand_collective(cfg.op, cfg.algorithm, cfg.gpus, static_cast<double>(b)), gpus);
    // Round through the engine's time type, exactly as an executor would schedule it.
    const double t = SimTime::from_seconds(c.seconds).seconds();
    CollectiveRow row{b, t, 0, 0};
    if (t > 0) {
      row.algbw_GBps = static_cast<double>(b) / t / 1e9;
      row.busbw_GBps = row.algbw_GBps * busbw_factor(cfg.op, cfg.gpus);
    }
    rows.push_back(row);
    if (b > cfg.max_bytes / cfg.step_factor) break;
  }
  return rows;
}

std::string format_collective_table(const CollectiveSweepConfig& cfg, const std::vector<CollectiveRow>& rows) {
  std::string out;
  char buf[256];
  std::snprintf(buf, sizeof buf, "# clustersim collective: %s, %s, %d GPUs on %d x %s (%s fabric), analytic network\n",
                std::string(to_string(cfg.op)).c_str(), std::string(to_string(cfg.algorithm)).c_str(), cfg.gpus,
                cfg.nodes, cfg.cluster.node.preset.c_str(), std::string(to_string(cfg.cluster.fabric.kind)).c_str());
  out += buf;
  std::snprintf(buf, sizeof buf, "#%12s %12s %8s %8s %12s %12s %12s\n", "size", "count", "type", "redop", "time",
                "algbw", "busbw");
  out += buf;
  std::snprintf(buf, sizeof buf, "#%12s %12s %8s %8s %12s %12s %12s\n", "(B)", "(elements)", "", "", "(us)", "(GB/s)",
                "(GB/s)");
  out += buf;
  const bool reduces = cfg.op == CollectiveKind::AllReduce || cfg.op == CollectiveKind::ReduceScatter ||
                       cfg.op == CollectiveKind::Reduce;
  for (const CollectiveRow& r : rows) {
    std::snprintf(buf, sizeof buf, " %12lld %12lld %8s %8s %12.2f %12.2f %12.2f\n", static_cast<long long>(r.bytes),
                  static_cast<long long>(r.bytes / 4), "float", reduces ? "sum" : "none", r.time_s * 1e6, r.algbw_GBps,
                  r.busbw_GBps);
    out += buf;
  }
  return out;
}

std::string format_collective_json(const CollectiveSweepConfig& cfg, const std::vector<CollectiveRow>& rows) {
  std::string out = "{\"kind\": \"collective\", \"op\": \"" + std::string(to_string(cfg.op)) + "\", \"algorithm\": \"" +
                    std::string(to_string(cfg.algorithm)) + "\", \"cluster\": \"" +
                    json_escape(cfg.cluster.node.preset) + "\", \"gpus\": " + std::to_string(cfg.gpus) +
                    ", \"nodes\": " + std::to_string(cfg.nodes) + ", \"network_model\": \"analytic\", \"results\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const CollectiveRow& r = rows[i];
    out += (i ? ", " : "") + std::string("{\"bytes\": ") + std::to_string(r.bytes) +
           ", \"time_s\": " + format_number(r.time_s) + ", \"algbw_GBps\": " + format_number(r.algbw_GBps) +
           ", \"busbw_GBps\": " + format_number(r.busbw_GBps) + "}";
  }
  return out + "]}";
}

}  // namespace clustersim
