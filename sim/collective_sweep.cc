#include "sim/collective_sweep.h"

#include <cstdio>
#include <filesystem>

#include "cost_models/flow_network.h"
#include "cost_models/network.h"
#include "cost_models/tuner.h"
#include "plan/time.h"
#include "reports/summary.h"

namespace clustersim {

std::string sweep_op_name(const CollectiveSweepConfig& cfg) {
  return cfg.kind == SweepOp::SendRecv ? "send-recv" : std::string(to_string(cfg.op));
}

std::vector<CollectiveRow> run_collective_sweep(const CollectiveSweepConfig& cfg) {
  ClusterSpec spec = cfg.cluster;
  if (spec.topology_file.empty()) {  // a topology file's cluster stays as given
    spec.nodes = cfg.nodes;
    spec.node.gpus = cfg.gpus * cfg.concurrent / cfg.nodes;
  }
  Topology topo(spec);
  AnalyticNetwork net(topo, cfg.profile);
  std::vector<std::vector<int32_t>> groups(static_cast<size_t>(cfg.concurrent));
  for (int j = 0; j < cfg.concurrent; ++j)
    for (int i = 0; i < cfg.gpus; ++i) groups[static_cast<size_t>(j)].push_back(j + i * cfg.concurrent);
  const double factor = cfg.kind == SweepOp::SendRecv ? 1.0 : busbw_factor(cfg.op, cfg.gpus);

  std::vector<CollectiveRow> rows;
  for (int64_t b = cfg.min_bytes; b <= cfg.max_bytes; b *= cfg.step_factor) {
    const double bytes = static_cast<double>(b);
    CollectiveRow row;
    row.bytes = b;
    std::vector<Expansion> exps;
    std::vector<double> measured;  // per group: a calibration profile's time, or -1
    for (const auto& g : groups) {
      if (cfg.kind == SweepOp::SendRecv) {
        // NCCL picks a send's protocol by its size (nccl_p2p_protocol), whatever NCCL_PROTO says.
        const GroupLayout layout = layout_of(topo, g);
        const Protocol p = nccl_p2p_protocol(bytes, layout.nodes() > 1);
        exps.push_back(expand_sendrecv(cfg.gpus, bytes, p, cfg.profile));
        row.proto = p;
        measured.push_back(cfg.protocol ? measured_series_seconds(cfg.profile, "send-recv", "p2p",
                                                                 to_string(*cfg.protocol), layout, bytes)
                                        : measured_p2p_seconds(cfg.profile, layout, bytes));
        continue;
      }
      const GroupLayout layout = layout_of(topo, g);
      const CollectiveChoice c =
          choose_collective(cfg.op, bytes, layout, g, net, cfg.profile, cfg.algorithm, cfg.protocol);
      row.algo = c.algo;
      row.proto = c.proto;
      measured.push_back(c.measured ? c.predicted_s : -1);
      exps.push_back(expand_collective(CollectiveRequest{cfg.op, c.algo, c.proto, bytes, 0}, layout, cfg.profile));
    }
    double t = 0;
    if (cfg.flow) {
      FlowNetwork flow(topo, cfg.profile);
      for (size_t j = 0; j < groups.size(); ++j) flow.start(exps[j], groups[j], SimTime::zero());
      std::vector<uint64_t> done;
      SimTime now;
      while (!flow.idle()) {
        now = flow.next_time();
        flow.advance(now, done);
      }
      t = now.seconds();
    } else {
      // Independent groups do not see each other in the analytic model; a calibrated fit
      // for the collective inside a node replaces the model's time.
      for (size_t j = 0; j < groups.size(); ++j) {
        double m = measured[j];
        if (m < 0) m = net.run(exps[j], groups[j], false).seconds;
        t = std::max(t, SimTime::from_seconds(m).seconds());
      }
    }
    row.time_s = t;
    if (t > 0) {
      row.algbw_GBps = bytes / t / 1e9;
      row.busbw_GBps = row.algbw_GBps * factor;
    }
    rows.push_back(row);
    if (b > cfg.max_bytes / cfg.step_factor) break;
  }
  return rows;
}

std::string format_collective_table(const CollectiveSweepConfig& cfg, const std::vector<CollectiveRow>& rows) {
  std::string out;
  char buf[320];
  ClusterSpec shown = cfg.cluster;
  if (shown.topology_file.empty()) {
    shown.nodes = cfg.nodes;
    shown.node.gpus = cfg.gpus * cfg.concurrent / cfg.nodes;
  }
  std::snprintf(buf, sizeof buf, "# clustersim collective: %s, %d GPUs%s on %s, %s network\n",
                sweep_op_name(cfg).c_str(), cfg.gpus,
                cfg.concurrent > 1 ? (" x " + std::to_string(cfg.concurrent) + " concurrent groups").c_str() : "",
                describe(shown).c_str(), cfg.flow ? "flow" : "analytic");
  out += buf;
  std::snprintf(buf, sizeof buf, "#%12s %12s %8s %8s %12s %12s %12s  %-16s %s\n", "size", "count", "type", "redop",
                "time", "algbw", "busbw", "algorithm", "protocol");
  out += buf;
  std::snprintf(buf, sizeof buf, "#%12s %12s %8s %8s %12s %12s %12s\n", "(B)", "(elements)", "", "", "(us)", "(GB/s)",
                "(GB/s)");
  out += buf;
  const bool reduces =
      cfg.kind == SweepOp::Collective && (cfg.op == CollectiveKind::AllReduce ||
                                          cfg.op == CollectiveKind::ReduceScatter || cfg.op == CollectiveKind::Reduce);
  for (const CollectiveRow& r : rows) {
    std::snprintf(buf, sizeof buf, " %12lld %12lld %8s %8s %12.2f %12.2f %12.2f  %-16s %s\n",
                  static_cast<long long>(r.bytes), static_cast<long long>(r.bytes / 4), "float",
                  reduces ? "sum" : "none", r.time_s * 1e6, r.algbw_GBps, r.busbw_GBps,
                  cfg.kind == SweepOp::SendRecv ? "p2p" : std::string(to_string(r.algo)).c_str(),
                  std::string(to_string(r.proto)).c_str());
    out += buf;
  }
  return out;
}

std::string format_collective_json(const CollectiveSweepConfig& cfg, const std::vector<CollectiveRow>& rows) {
  std::string out =
      "{\"kind\": \"collective\", \"op\": \"" + sweep_op_name(cfg) + "\", \"algorithm\": \"" +
      (cfg.algorithm ? std::string(to_string(*cfg.algorithm)) : std::string("auto")) + "\", \"protocol\": \"" +
      (cfg.protocol ? std::string(to_string(*cfg.protocol)) : std::string("auto")) + "\", \"cluster\": \"" +
      json_escape(cfg.cluster.topology_file.empty()
                      ? cfg.cluster.node.preset
                      : std::filesystem::path(cfg.cluster.topology_file).filename().string()) +
      "\", \"gpus\": " + std::to_string(cfg.gpus) +
      ", \"concurrent\": " + std::to_string(cfg.concurrent) + ", \"nodes\": " + std::to_string(cfg.nodes) +
      ", \"network_model\": \"" + (cfg.flow ? "flow" : "analytic") + "\", \"results\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const CollectiveRow& r = rows[i];
    out += (i ? ", " : "") + std::string("{\"bytes\": ") + std::to_string(r.bytes) +
           ", \"time_s\": " + format_number(r.time_s) + ", \"algbw_GBps\": " + format_number(r.algbw_GBps) +
           ", \"busbw_GBps\": " + format_number(r.busbw_GBps) + ", \"algorithm\": \"" +
           (cfg.kind == SweepOp::SendRecv ? "p2p" : std::string(to_string(r.algo))) + "\", \"protocol\": \"" +
           std::string(to_string(r.proto)) + "\"}";
  }
  return out + "]}";
}

}  // namespace clustersim
