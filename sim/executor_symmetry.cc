// The TP ranks of a stage folded onto its first (Executor::fold_tensor_parallel).
//
// A TP group's ranks run one program and meet at every layer's collectives. Rank i of the
// group has the timeline of rank 0 when the plan and the network treat them alike: every
// group rank i belongs to is rank 0's group with each member moved i places along its own
// TP group, every send goes to the peer i places along from rank 0's peer, and each of
// those collectives and sends costs what rank 0's does. Then the ranks at position i of
// every TP group form an isomorphic copy of those at position 0, event for event, and
// only position 0 need run. The check is made, not assumed: a topology file or a fabric
// whose leaves split a node's NICs unevenly fails it where the costs differ, and the run
// then simulates every TP rank as before.
//
// Only where nothing else tells the ranks apart: the analytic network (the flow network
// shares links among all transfers, the folded ranks' too), no variability (each rank its
// own draw), one GPU model, and no link usage to record (the folded ranks' traffic would be
// missing from it).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "sim/executor_state.h"

namespace clustersim::exec {

bool Executor::fold_tensor_parallel() {
  if (flow_ || opt_.simulate_all_ranks || opt_.record_link_usage || !opt_.rank_slowdown.empty() ||
      opt_.kernel_jitter > 0 || topo_.gpu_models().size() != 1)
    return false;
  const auto tp_kind = static_cast<size_t>(GroupKind::TP);
  const size_t world = static_cast<size_t>(plan_.world_size);
  // Each rank's TP group and place in it.
  std::vector<int32_t> tp_group(world, -1), place(world, -1);
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    if (plan_.groups[g].kind != GroupKind::TP) continue;
    const auto& ranks = plan_.groups[g].ranks;
    for (size_t i = 0; i < ranks.size(); ++i) {
      const auto r = static_cast<size_t>(ranks[i]);
      if (tp_group[r] >= 0) return false;  // a rank in two TP groups: not a layout this reads
      tp_group[r] = static_cast<int32_t>(g);
      place[r] = static_cast<int32_t>(i);
    }
  }
  // The rank `i` places along rank m's TP group; -1 if it has none of that size.
  auto moved = [&](int32_t m, size_t i, size_t k) -> int32_t {
    if (m < 0) return -1;
    const int32_t g = tp_group[static_cast<size_t>(m)];
    if (g < 0) return k == 1 ? m : -1;
    const auto& ranks = plan_.groups[static_cast<size_t>(g)].ranks;
    if (ranks.size() != k) return -1;
    return ranks[(static_cast<size_t>(place[static_cast<size_t>(m)]) + i) % k];
  };
  // Whether group g holds each of its members moved i places (a union of whole TP groups).
  std::map<std::pair<int32_t, size_t>, bool> closed_memo;
  auto closed = [&](int32_t g, size_t i, size_t k) {
    auto [it, fresh] = closed_memo.try_emplace({g, i}, true);
    if (fresh) {
      const auto& ranks = plan_.groups[static_cast<size_t>(g)].ranks;
      std::vector<char> in(world, 0);
      for (int32_t r : ranks) in[static_cast<size_t>(r)] = 1;
      for (int32_t r : ranks) {
        const int32_t m = moved(r, i, k);
        if (m < 0 || !in[static_cast<size_t>(m)]) {
          it->second = false;
          break;
        }
      }
    }
    return it->second;
  };
  // Each program's distinct collectives and sends, one op standing for each.
  std::map<uint32_t, std::vector<const Op*>> signatures;
  auto ops_of = [&](uint32_t p) -> const std::vector<const Op*>& {
    auto [it, fresh] = signatures.try_emplace(p);
    if (fresh) {
      std::map<std::tuple<int, int, int, int, int32_t, bool, int64_t>, const Op*> seen;
      for (const Op& op : plan_.programs[p].ops) {
        if (op.kind != OpKind::Collective && op.kind != OpKind::Send && op.kind != OpKind::Recv) continue;
        const auto key = std::make_tuple(static_cast<int>(op.kind), static_cast<int>(op.group),
                                         static_cast<int>(op.collective), static_cast<int>(op.phase),
                                         op.kind == OpKind::Collective ? 0 : op.peer, op.relative_peer, op.bytes);
        if (seen.emplace(key, &op).second) it->second.push_back(&op);
      }
    }
    return it->second;
  };
  std::vector<std::pair<int32_t, int32_t>> folds;  // (rank, its TP group's first)
  for (size_t g = 0; g < plan_.groups.size(); ++g) {
    if (plan_.groups[g].kind != GroupKind::TP) continue;
    const auto& group = plan_.groups[g].ranks;
    const size_t k = group.size();
    const int32_t r0 = group.front();
    if (k < 2 || rep_[static_cast<size_t>(r0)] != r0) continue;  // mirrored already, with its group
    const uint32_t program = plan_.rank_program[static_cast<size_t>(r0)];
    for (size_t i = 1; i < k; ++i) {
      const int32_t ri = group[i];
      if (rep_[static_cast<size_t>(ri)] == r0) continue;  // the planner's mirror already
      if (rep_[static_cast<size_t>(ri)] != ri || plan_.rank_program[static_cast<size_t>(ri)] != program) return false;
      // Every other group of rank i: rank 0's, each member moved i places along.
      for (size_t kind = 0; kind < kGroupKinds; ++kind) {
        if (kind == tp_kind) continue;
        const int32_t g0 = plan_.group_of(r0, static_cast<GroupKind>(kind));
        const int32_t gi = plan_.group_of(ri, static_cast<GroupKind>(kind));
        if ((g0 < 0) != (gi < 0)) return false;
        if (g0 < 0) continue;
        const auto& a = plan_.groups[static_cast<size_t>(g0)].ranks;
        if (g0 == gi) {
          // One group holding both (the world's): it must hold every member moved too, so
          // that it is the same group seen from either.
          if (!closed(g0, i, k)) return false;
          continue;
        }
        const auto& b = plan_.groups[static_cast<size_t>(gi)].ranks;
        if (a.size() != b.size() || group_spans_nodes_[static_cast<size_t>(g0)] != group_spans_nodes_[static_cast<size_t>(gi)])
          return false;
        // Rank 0's group holds place-0 ranks alone, so that its simulated members are all
        // it waits for (a member at another place would be one a folded rank stands for).
        for (size_t j = 0; j < a.size(); ++j)
          if (place[static_cast<size_t>(a[j])] != 0 || moved(a[j], i, k) != b[j]) return false;
      }
      // What each collective and send costs rank i, against rank 0.
      for (const Op* op : ops_of(program)) {
        if (op->kind == OpKind::Collective) {
          const int32_t g0 = plan_.group_of(r0, op->group), gi = plan_.group_of(ri, op->group);
          if (g0 < 0 || gi < 0) return false;
          if (g0 == gi) continue;  // the group they share: one collective, one cost
          if (collective_cost(g0, *op).duration != collective_cost(gi, *op).duration) return false;
          continue;
        }
        const int32_t p0 = p2p_peer(plan_, r0, *op), pi = p2p_peer(plan_, ri, *op);
        if (p0 < 0 || pi < 0 || moved(p0, i, k) != pi || network_peer(r0, *op) != network_peer(ri, *op))
          return false;
        const bool send = op->kind == OpKind::Send;
        auto gpu = [&](int32_t r) { return plan_.rank_gpu[static_cast<size_t>(r)]; };
        const SimTime t0 = send ? p2p_cost(gpu(r0), gpu(p0), op->bytes).first : p2p_cost(gpu(p0), gpu(r0), op->bytes).first;
        const SimTime ti = send ? p2p_cost(gpu(ri), gpu(pi), op->bytes).first : p2p_cost(gpu(pi), gpu(ri), op->bytes).first;
        if (t0 != ti) return false;
      }
      folds.emplace_back(ri, r0);
    }
  }
  if (folds.empty()) return false;
  for (auto [r, first] : folds) {
    tp_rep_[static_cast<size_t>(r)] = first;
    ++fold_weight_[static_cast<size_t>(first)];
  }
  for (int32_t& rep : rep_) rep = tp_rep_[static_cast<size_t>(rep)];
  return true;
}

bool Executor::mirrored_sends_alike() {
  // The ranks each representative stands for.
  std::vector<std::vector<int32_t>> mirrors(static_cast<size_t>(plan_.world_size));
  bool any = false;
  for (int32_t r = 0; r < plan_.world_size; ++r) {
    const int32_t rep = plan_.mirror_of[static_cast<size_t>(r)];
    if (rep != r) mirrors[static_cast<size_t>(rep)].push_back(r), any = true;
  }
  if (!any) return true;
  std::vector<uint32_t> load(topo_.links().size(), 0);
  std::vector<std::vector<uint32_t>> routes;
  std::set<std::pair<int32_t, int32_t>> seen;  // (representative, offset) checked
  for (int32_t r = 0; r < plan_.world_size; ++r) {
    if (mirrors[static_cast<size_t>(r)].empty()) continue;
    for (const Op& op : plan_.programs[plan_.rank_program[static_cast<size_t>(r)]].ops) {
      if (op.kind != OpKind::Send) continue;
      const int32_t peer = p2p_peer(plan_, r, op);
      if (peer < 0 || !seen.emplace(r, peer - r).second) continue;
      // The flows arrive_p2p launches together: the representative's and each mirror's
      // whose peer mirrors the representative's peer.
      routes.clear();
      auto add = [&](int32_t a, int32_t b) {
        const auto links = topo_.route(plan_.rank_gpu[static_cast<size_t>(a)], plan_.rank_gpu[static_cast<size_t>(b)]);
        routes.emplace_back(links.begin(), links.end());
      };
      add(r, peer);
      for (int32_t m : mirrors[static_cast<size_t>(r)]) {
        const int32_t md = m + (peer - r);
        if (md < 0 || md >= plan_.world_size || plan_.mirror_of[static_cast<size_t>(md)] != peer) continue;
        add(m, md);
      }
      for (const auto& route : routes)
        for (uint32_t l : route) ++load[l];
      // Each flow's share of its narrowest link when the group's flows alone split them.
      auto share = [&](const std::vector<uint32_t>& route) {
        double s = std::numeric_limits<double>::infinity();
        for (uint32_t l : route) {
          const Link& link = topo_.links()[l];
          s = std::min(s, link.bandwidth * opt_.network.efficiency(link.cls) / load[l]);
        }
        return s;
      };
      const double first = share(routes.front());
      bool alike = true;
      for (const auto& route : routes) alike = alike && std::abs(share(route) - first) <= 1e-9 * first;
      for (const auto& route : routes)
        for (uint32_t l : route) --load[l];
      if (!alike) return false;
    }
  }
  return true;
}

}  // namespace clustersim::exec
