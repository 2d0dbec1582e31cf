// `clustersim collective`: a collective's size sweep, printed like nccl-tests.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "calibrate/profile.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "scenarios/scenario.h"
#include "scenarios/topology_file.h"
#include "scenarios/units.h"
#include "sim/collective_sweep.h"
#include "topology/presets.h"

namespace clustersim {

int cmd_collective(const std::vector<std::string>& args) {
  refuse_repeated(args,
                  {"--op", "--gpus", "--nodes", "--cluster", "--topology-file", "--algo", "--proto", "--network-model",
                   "--concurrent", "--fabric", "--oversubscription", "--nics-per-leaf", "--profile", "--min", "--max"});
  CollectiveSweepConfig cfg;
  std::string preset, topology_file, op = "all-reduce", algo = "auto", proto = "auto", model = "auto",
                                     fabric = "fat-tree";
  double oversub = 1.0;
  int nics_per_leaf = 32;
  int nodes = 0;
  bool json = false, have_gpus = false, allow_large = false;
  auto as_int = [](const std::string& flag, const std::string& v) {
    try {
      size_t used = 0;
      long long x = std::stoll(v, &used);
      if (used != v.size() || x < 1 || x > (1 << 20)) throw std::invalid_argument(v);
      return static_cast<int>(x);
    } catch (const std::exception&) {
      throw InputError(SourceMark{flag, 0, 0}, "expected a positive integer up to 1048576, got '" + v + "'");
    }
  };
  auto as_size = [](const std::string& flag, const std::string& v) {
    int64_t b = 0;
    std::string why;
    if (!parse_size(v, b, why)) throw InputError(SourceMark{flag, 0, 0}, why);
    if (b < 1) throw InputError(SourceMark{flag, 0, 0}, "size must be at least 1 byte");
    return b;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--op")
      op = need_value(args, i);
    else if (a == "--gpus") {
      cfg.gpus = as_int(a, need_value(args, i));
      if (cfg.gpus < 2)
        throw InputError(SourceMark{"--gpus", 0, 0},
                         "--gpus 1: a collective over one GPU moves nothing, expected 2 or "
                         "more");
      have_gpus = true;
    } else if (a == "--nodes")
      nodes = as_int(a, need_value(args, i));
    else if (a == "--cluster")
      preset = need_value(args, i);
    else if (a == "--topology-file")
      topology_file = need_value(args, i);
    else if (a == "--algo")
      algo = need_value(args, i);
    else if (a == "--proto")
      proto = need_value(args, i);
    else if (a == "--network-model")
      model = need_value(args, i);
    else if (a == "--concurrent")
      cfg.concurrent = as_int(a, need_value(args, i));
    else if (a == "--fabric")
      fabric = need_value(args, i);
    else if (a == "--oversubscription") {
      const std::string v = need_value(args, i);
      char* end = nullptr;
      oversub = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(oversub >= 1.0) || oversub > 1e6)
        throw InputError(SourceMark{a, 0, 0}, "expected a number from 1 to 1e6, got '" + v + "'");
    } else if (a == "--nics-per-leaf")
      nics_per_leaf = as_int(a, need_value(args, i));
    else if (a == "--profile")
      cfg.profile = load_profile(need_value(args, i), SourceMark{"--profile", 0, 0}).network;
    else if (a == "--min")
      cfg.min_bytes = as_size(a, need_value(args, i));
    else if (a == "--max")
      cfg.max_bytes = as_size(a, need_value(args, i));
    else if (a == "--json")
      json = true;
    else if (a == "--allow-large")
      allow_large = true;
    else
      throw UsageError("unknown option '" + a + "' for collective");
  }
  if (!have_gpus) throw UsageError("collective needs --gpus N");
  const int64_t ranks = static_cast<int64_t>(cfg.gpus) * cfg.concurrent;  // over all the groups
  if (preset.empty() == topology_file.empty())
    throw UsageError("collective needs --cluster PRESET or --topology-file T.yaml, one of them");
  if (op == "send-recv")
    cfg.kind = SweepOp::SendRecv;
  else if (!parse_collective(op, cfg.op))
    throw InputError(SourceMark{"--op", 0, 0},
                     "unknown operation '" + op +
                         "', expected all-reduce, all-gather, reduce-scatter, broadcast, reduce, "
                         "all-to-all or send-recv");
  if (algo != "auto") {
    Algorithm a;
    if (!parse_algorithm(algo, a))
      throw InputError(SourceMark{"--algo", 0, 0}, "unknown algorithm '" + algo +
                                                       "', expected auto, ring, tree, direct, halving-doubling, "
                                                       "hierarchical or nvls");
    cfg.algorithm = a;
  }
  if (proto != "auto") {
    Protocol p;
    if (!parse_protocol(proto, p))
      throw InputError(SourceMark{"--proto", 0, 0},
                       "unknown protocol '" + proto + "', expected auto, LL, LL128 or Simple");
    cfg.protocol = p;
  }
  if (model != "auto" && model != "analytic" && model != "flow")
    throw InputError(SourceMark{"--network-model", 0, 0},
                     "unknown network model '" + model + "', expected auto, analytic or flow");
  if (cfg.kind == SweepOp::SendRecv && cfg.algorithm)
    throw InputError(SourceMark{"--algo", 0, 0},
                     "send-recv is one transfer between two GPUs, not an algorithm's steps, expected no --algo");
  if (!topology_file.empty()) {
    // The cluster as the file gives it; the groups take its first GPUs.
    for (const char* flag : {"--nodes", "--fabric", "--oversubscription", "--nics-per-leaf"})
      for (const std::string& a : args)
        if (a == flag) throw UsageError(std::string(flag) + " does not go with --topology-file (the file gives it)");
    cfg.cluster = load_topology_file(topology_file, SourceMark{"--topology-file", 0, 0});
    cfg.nodes = cfg.cluster.nodes;
    const int64_t have = static_cast<int64_t>(cfg.cluster.nodes) * cfg.cluster.node.gpus;
    if (ranks > have)
      throw InputError(SourceMark{"--gpus", 0, 0}, "--gpus x --concurrent = " +
                                                       std::to_string(ranks) +
                                                       " ranks, the topology file has " + std::to_string(have) +
                                                       " GPUs");
    // The ranks take the file's first GPUs: whole nodes, or part of the first one. A group
    // that ends partway into a later node is one the collective models do not lay out (their
    // rings and trees take the same GPUs on every node), as --cluster refuses it too.
    int64_t covered = 0;
    for (int n = 0; n < cfg.cluster.nodes && covered < ranks; ++n) {
      const int64_t here = cfg.cluster.node_at(n).gpus;
      if (covered + here > ranks && n > 0)
        throw InputError(SourceMark{"--gpus", 0, 0},
                         "--gpus x --concurrent = " + std::to_string(ranks) + " ranks end partway into node " +
                             std::to_string(n) + " of the topology file (" + std::to_string(covered) +
                             " GPUs before it, " + std::to_string(here) +
                             " on it), expected whole nodes or GPUs of the first node only");
      covered += here;
      cfg.nodes = n + 1;  // the nodes the ranks use, as --cluster's count reads
    }
  } else {
    const NodeSpec* node = find_node_preset(preset);
    if (!node) {
      std::string names;
      for (const auto& n : node_preset_names()) names += (names.empty() ? "" : ", ") + n;
      throw InputError(SourceMark{"--cluster", 0, 0},
                       "unknown cluster preset '" + preset + "', expected one of: " + names);
    }
    cfg.cluster.node = *node;
    if (!parse_fabric(fabric, cfg.cluster.fabric.kind))
      throw InputError(SourceMark{"--fabric", 0, 0},
                       "unknown fabric '" + fabric + "', expected fat-tree, rail-optimized, switch, ring or torus");
    cfg.cluster.fabric.oversubscription = oversub;
    cfg.cluster.fabric.nics_per_leaf = nics_per_leaf;
    if (ranks > (int64_t{1} << (allow_large ? 24 : 20)))
      throw InputError(SourceMark{"--concurrent", 0, 0}, "--gpus x --concurrent = " +
                                                             std::to_string(ranks) +
                                                             " ranks is past the budget of " + std::to_string(int64_t{1} << (allow_large ? 24 : 20)) + (allow_large ? "" : " (--allow-large raises it to 16777216)") + ", expected fewer");
    const int total = static_cast<int>(ranks);  // within the budget just checked
    cfg.nodes = nodes > 0 ? nodes : (total + node->gpus - 1) / node->gpus;
    if (total % cfg.nodes != 0)
      throw InputError(SourceMark{"--gpus", 0, 0}, "--gpus is the total over all nodes: " + std::to_string(total) +
                                                       " GPUs do not split evenly over " + std::to_string(cfg.nodes) +
                                                       " nodes");
    if (total / cfg.nodes > node->gpus)
      throw InputError(SourceMark{"--gpus", 0, 0},
                       std::to_string(total) + " GPUs on " + std::to_string(cfg.nodes) + " node(s) of " + preset +
                           " need " + std::to_string(total / cfg.nodes) + " GPUs per node, the preset has " +
                           std::to_string(node->gpus) + "; add --nodes");
    if (cfg.nodes > 1) cfg.cluster.node.nics = std::min(cfg.cluster.node.nics, total / cfg.nodes);
  }
  // auto as a scenario's network_model: flow where concurrent transfers share a link (GPUs
  // sharing a NIC, an oversubscribed fabric, a topology file's explicit links).
  if (model == "auto") {
    ClusterSpec used = cfg.cluster;
    used.nodes = cfg.nodes;  // the nodes the ranks take (a topology file's first ones)
    model = auto_network_model(used);
  }
  cfg.flow = model == "flow";
  // The flow network shares every link among every transfer: its cost grows past the
  // analytic one's, about a minute and 16 GB at 2^20 ranks.
  if (cfg.flow && !allow_large && ranks > (int64_t{1} << 16))
    throw InputError(SourceMark{"--gpus", 0, 0},
                     "--gpus x --concurrent = " + std::to_string(ranks) +
                         " ranks on the flow network is past its budget of 65536 (--allow-large runs it anyway; "
                         "--network-model analytic takes up to 1048576)");
  // An all-to-all (and any direct exchange) moves a share between every pair of a group:
  // p·(p − 1) transfers, each with its route and flow, where a ring moves p a step. At 4,096
  // ranks that is 16.7 M transfers (past a minute and 2 GB each size); at 65,536, 4.3 G.
  if (cfg.kind == SweepOp::Collective &&
      (cfg.op == CollectiveKind::AllToAll || cfg.algorithm == std::optional<Algorithm>(Algorithm::Direct))) {
    const int64_t p = cfg.gpus;
    // A direct broadcast or reduce moves one share between the root and each other rank.
    const bool rooted = cfg.op == CollectiveKind::Broadcast || cfg.op == CollectiveKind::Reduce;
    const int64_t transfers = static_cast<int64_t>(cfg.concurrent) * (rooted ? p - 1 : p * (p - 1)) *
                              (cfg.op == CollectiveKind::AllReduce ? 2 : 1);
    const int64_t budget = int64_t{1} << (allow_large ? 26 : cfg.flow ? 20 : 22);
    if (transfers > budget)
      throw InputError(SourceMark{"--gpus", 0, 0},
                       std::string(cfg.op == CollectiveKind::AllToAll ? "an all-to-all" : "a direct exchange") +
                           " of " + std::to_string(p) +
                           " ranks moves a share between every pair: " + std::to_string(transfers) + " transfers" +
                           (cfg.concurrent > 1 ? " over the " + std::to_string(cfg.concurrent) + " groups" : "") +
                           ", past the budget of " + std::to_string(budget) +
                           (allow_large ? std::string()
                                        : std::string(" on the ") + (cfg.flow ? "flow" : "analytic") +
                                              " network (--allow-large raises it to 67108864)") +
                           ", expected fewer ranks");
  }
  if (cfg.min_bytes > cfg.max_bytes) throw InputError(SourceMark{"--min", 0, 0}, "--min is larger than --max");
  // The rows count float elements, as nccl-tests' do: a size is whole elements of 4 bytes.
  for (const auto& [flag, b] : {std::pair{"--min", cfg.min_bytes}, {"--max", cfg.max_bytes}})
    if (b < 4 || b % 4 != 0)
      throw InputError(SourceMark{flag, 0, 0}, std::to_string(b) +
                                                   " B is not a whole number of float elements (4 B each), "
                                                   "expected a multiple of 4 bytes");
  std::vector<CollectiveRow> rows;
  try {
    rows = run_collective_sweep(cfg);
  } catch (const std::invalid_argument& e) {
    throw InputError(SourceMark{"--algo", 0, 0}, e.what());
  }
  std::cout << (json ? format_collective_json(cfg, rows) + "\n" : format_collective_table(cfg, rows));
  return 0;
}

}  // namespace clustersim
