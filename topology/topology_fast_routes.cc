// Topology's structured routes (topology/topology.h): on switch and whole-node fat-tree fabrics a
// route is built from per-node templates and the fabric's rails instead of searched.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <queue>
#include <stdexcept>

#include "topology/route_hash.h"
#include "topology/topology.h"

namespace clustersim {

using route_hash::mix;
using route_hash::route_key;
bool Topology::fast_routing_applies() const {
  if (spec_.nodes < 2) return false;
  const FabricSpec& f = spec_.fabric;
  if (f.kind == FabricKind::Switch) return true;
  // Whole nodes under each leaf: every NIC of a node reaches the fabric at one leaf.
  return f.kind == FabricKind::FatTree && f.nics_per_leaf % spec_.node.nics == 0;
}

void Topology::index_nics() {
  // NICs: their vertex, fabric switch and the links between.
  for (uint32_t l = 0; l < links_.size(); ++l) {
    const VertexProps& a = graph_[links_[l].src];
    const VertexProps& b = graph_[links_[l].dst];
    if (a.kind == VertexKind::Nic && b.kind == VertexKind::Switch) {
      const size_t idx =
          static_cast<size_t>(a.node) * static_cast<size_t>(spec_.node.nics) + static_cast<size_t>(a.local);
      if (nic_up_.size() <= idx)
        nic_up_.resize(idx + 1), nic_down_.resize(idx + 1), nic_switch_.resize(idx + 1), nic_vertex_.resize(idx + 1);
      nic_up_[idx] = l;
      nic_down_[idx] = l + 1;  // links are added in pairs: a -> b, then b -> a
      nic_switch_[idx] = links_[l].dst;
      nic_vertex_[idx] = links_[l].src;
    }
  }
}

void Topology::prepare_search_pruning() {
  prune_third_nics_ = false;
  spine_of_vertex_.clear();
  const size_t nics = static_cast<size_t>(spec_.node.nics);
  if (nic_switch_.size() != static_cast<size_t>(spec_.nodes) * nics || nics == 0) return;
  bool one_switch = true;
  for (size_t n = 0; n < static_cast<size_t>(spec_.nodes) && one_switch; ++n)
    for (size_t k = 1; k < nics; ++k) one_switch = one_switch && nic_switch_[n * nics + k] == nic_switch_[n * nics];
  if (two_tier_) {
    spine_of_vertex_.assign(boost::num_vertices(graph_), -1);
    for (size_t i = 0; i < spine_count_; ++i) spine_of_vertex_[links_[leaf_up_[i]].dst] = static_cast<int32_t>(i);
    // Every NIC link and every leaf-spine link: the detour leaf -> spine -> leaf must cost
    // no more than NIC -> node -> NIC's two links.
    int64_t nic_min = std::numeric_limits<int64_t>::max();
    for (uint32_t l : nic_up_) nic_min = std::min<int64_t>(nic_min, std::llround(1e18 / links_[l].bandwidth));
    const int64_t spine_cost = std::llround(1e18 / links_[leaf_up_[0]].bandwidth);
    prune_third_nics_ = 2 * spine_cost <= 2 * nic_min;
  } else {
    prune_third_nics_ = one_switch;
  }
}

void Topology::prepare_fast_routing() {
  fast_state_ = -1;
  {
    const size_t nv = boost::num_vertices(graph_);
    nic_node_.assign(nv, -1);
    is_gpu_.assign(nv, 0);
    for (size_t v = 0; v < nv; ++v) {
      if (graph_[v].kind == VertexKind::Nic) nic_node_[v] = graph_[v].node;
      is_gpu_[v] = graph_[v].kind == VertexKind::Gpu;
    }
  }
  // The search's pruning needs a generated fabric and one NIC count on every node (its
  // NIC index is node · nics + k); a fabric given link by link keeps the plain search.
  if (spec_.nodes < 2 || !spec_.switches.empty()) return;
  for (const NodeSpec& n : spec_.node_specs)
    if (n.nics != spec_.node.nics) return;
  index_nics();
  prepare_two_tier();
  prepare_search_pruning();
  // The structured routes copy node 0's links: nodes built alike only.
  if (!spec_.uniform()) return;
  // Rail-optimized two-tier fabrics: between two GPUs on one rail, every route leaves the
  // source node by some NIC and enters the destination's by some NIC, and the rail's own
  // leaf (or the equal spines to the rail's other leaf) is as short a fabric part as any:
  // the route is exit template, rail, enter template where no other NIC ties
  // (rail_pair_is_fast). Pairs on different rails keep the search: a costlier exit onto
  // the destination's rail can save two fabric links.
  const bool rails = spec_.fabric.kind == FabricKind::RailOptimized && two_tier_;
  if (!fast_routing_applies() && !rails) return;
  const int g = spec_.node.gpus;
  // Templates from node 0: GPU -> own NIC and back, each a shortest path whose cost
  // equals the cheapest way to any NIC of the node (else the search is needed).
  auto cost = [&](const std::vector<uint32_t>& path) {
    int64_t c = 0;
    for (uint32_t l : path) c += std::llround(1e18 / links_[l].bandwidth);
    return c;
  };
  const uint32_t n0_end = node_link_base_.size() > 1 ? node_link_base_[1] : static_cast<uint32_t>(links_.size());
  auto in_node0 = [&](const std::vector<uint32_t>& path) {
    return std::all_of(path.begin(), path.end(), [&](uint32_t l) { return l < n0_end; });
  };
  // A path that leaves the node and comes back runs inside the node to some NIC, crosses
  // at least two fabric links, and runs inside the node from some NIC: a path inside the
  // node cheaper than the least such sum is the search's, ties and all (the search over
  // the whole graph floods the fabric first where the way through PCIe costs more).
  int64_t fabric_least = std::numeric_limits<int64_t>::max() / 4;
  for (const Link& l : links_)
    if (graph_[l.src].node < 0 || graph_[l.dst].node < 0) fabric_least = std::min(fabric_least, l.cost);
  constexpr int64_t kFar = std::numeric_limits<int64_t>::max() / 4;
  auto cost_or_far = [&](const std::vector<uint32_t>& p) { return p.empty() ? kFar : cost(p); };
  const int nics = spec_.node.nics;
  for (int a = 0; a < g; ++a) {
    const uint32_t gpu = gpus_[static_cast<size_t>(a)];
    const size_t nic = static_cast<size_t>(preferred_nic_local(a));
    std::vector<std::vector<uint32_t>> out(static_cast<size_t>(nics)), in(static_cast<size_t>(nics));
    std::vector<char> out_unique(static_cast<size_t>(nics), 1), in_unique(static_cast<size_t>(nics), 1);
    int64_t near_out = kFar, near_in = kFar;  // inside the node: GPU to its nearest NIC, and back
    for (size_t k = 0; k < static_cast<size_t>(nics); ++k) {
      bool u = true;
      out[k] = shortest_path(gpu, nic_vertex_[k], false, &u, /*node_only=*/true);
      out_unique[k] = u;
      u = true;
      in[k] = shortest_path(nic_vertex_[k], gpu, false, &u, /*node_only=*/true);
      in_unique[k] = u;
      near_out = std::min(near_out, cost_or_far(out[k]));
      near_in = std::min(near_in, cost_or_far(in[k]));
    }
    int64_t best_out = std::numeric_limits<int64_t>::max(), best_in = best_out;
    for (size_t k = 0; k < static_cast<size_t>(nics); ++k) {
      bool u = true;
      if (cost_or_far(out[k]) >= std::min(kFar, near_out + 2 * fabric_least)) {
        out[k] = shortest_path(gpu, nic_vertex_[k], false, &u);
        out_unique[k] = u;
      }
      u = true;
      if (cost_or_far(in[k]) >= std::min(kFar, 2 * fabric_least + near_in)) {
        in[k] = shortest_path(nic_vertex_[k], gpu, false, &u);
        in_unique[k] = u;
      }
      best_out = std::min(best_out, cost(out[k]));
      best_in = std::min(best_in, cost(in[k]));
    }
    if (cost(out[nic]) != best_out || !in_node0(out[nic]) || !in_node0(in[nic])) return;
    // Where another NIC ties with the GPU's own, the search chooses among them at the
    // fabric (the spine's equal-cost leaves), so each tied exit path must be the only one
    // to its NIC; on the way in, the tied NICs must meet at one vertex next to them, where
    // the search's affinity rule picks the GPU's own NIC.
    std::vector<std::vector<uint32_t>> tied(static_cast<size_t>(nics));
    bool follow_out = true, follow_in = cost(in[nic]) == best_in;
    uint32_t before_nic = UINT32_MAX, after_nic = UINT32_MAX;
    for (size_t k = 0; k < static_cast<size_t>(nics); ++k) {
      if (rails && cost(out[k]) == best_out) {
        const uint32_t v = links_[out[k].back()].src;
        follow_out = follow_out && out_unique[k] && in_node0(out[k]) && (before_nic == UINT32_MAX || v == before_nic);
        before_nic = v;
        tied[k] = out[k];
      }
      if (rails && cost(in[k]) == best_in) {
        const uint32_t v = links_[in[k].front()].dst;
        follow_in = follow_in && in_unique[k] && (after_nic == UINT32_MAX || v == after_nic);
        after_nic = v;
      }
    }
    tied[nic] = out[nic];
    ties_followed_out_.push_back(follow_out);
    ties_followed_in_.push_back(follow_in);
    tied_exit_.push_back(std::move(tied));
    exit_template_.push_back(std::move(out[nic]));
    enter_template_.push_back(std::move(in[nic]));
  }
  rail_pairs_only_ = !fast_routing_applies();
  fast_state_ = 1;
}

bool Topology::rail_pair_is_fast(int src, int dst) const {
  const int g = spec_.node.gpus;
  const int la = src % g, lb = dst % g;
  if (preferred_nic_local(la) != preferred_nic_local(lb)) return false;
  // On one leaf the rail is two fabric links, shorter than any way through another NIC
  // (another rail's leaf, a spine, back down: four).
  const size_t nics = static_cast<size_t>(spec_.node.nics);
  const size_t nic_a = static_cast<size_t>(node_of(src)) * nics + static_cast<size_t>(preferred_nic_local(la));
  const size_t nic_b = static_cast<size_t>(node_of(dst)) * nics + static_cast<size_t>(preferred_nic_local(lb));
  return nic_switch_[nic_a] == nic_switch_[nic_b] || rail_exit_nic(src, dst) >= 0;
}

int Topology::rail_exit_nic(int src, int dst) const {
  // Across the spines every route is four fabric links, so each NIC of the source's node
  // as cheap as the GPU's own ties with it. The search walks back from the destination:
  // into its GPU by its own NIC (affinity, where the tied NICs meet), down from the spine
  // chosen by destination-mod-k, and up from one of the tied NICs' leaves, again chosen by
  // the destination's NIC among those leaves in vertex order.
  const int g = spec_.node.gpus;
  const int la = src % g, lb = dst % g;
  if (!ties_followed_out_[static_cast<size_t>(la)] || !ties_followed_in_[static_cast<size_t>(lb)]) return -1;
  const size_t nics = static_cast<size_t>(spec_.node.nics);
  const size_t base_a = static_cast<size_t>(node_of(src)) * nics;
  const size_t nic_b = static_cast<size_t>(node_of(dst)) * nics + static_cast<size_t>(preferred_nic_local(lb));
  const uint32_t leaf_b = nic_switch_[nic_b];
  std::pair<uint32_t, int> leaves[64];
  size_t count = 0;
  const auto& tied = tied_exit_[static_cast<size_t>(la)];
  for (size_t k = 0; k < nics; ++k) {
    if (tied[k].empty()) continue;
    const uint32_t leaf = nic_switch_[base_a + k];
    if (leaf == leaf_b || count == std::size(leaves)) return -1;  // a shorter way, or too many to list
    for (size_t i = 0; i < count; ++i)
      if (leaves[i].first == leaf) return -1;  // two tied NICs on one leaf: left to the search
    leaves[count++] = {leaf, static_cast<int>(k)};
  }
  if (count == 1) return leaves[0].second;
  std::sort(leaves, leaves + count);
  return leaves[nic_b % count].second;
}

void Topology::prepare_two_tier() {
  const size_t nv = boost::num_vertices(graph_);
  std::vector<char> has_nic(nv, 0);
  for (uint32_t sw : nic_switch_) has_nic[sw] = 1;
  leaf_of_vertex_.assign(nv, -1);
  std::vector<int32_t> spine_of(nv, -1);
  std::vector<uint32_t> leaves, spines;
  for (uint32_t v = 0; v < nv; ++v) {
    if (graph_[v].kind != VertexKind::Switch) continue;
    if (has_nic[v]) {
      leaf_of_vertex_[v] = static_cast<int32_t>(leaves.size());
      leaves.push_back(v);
    } else {
      spine_of[v] = static_cast<int32_t>(spines.size());
      spines.push_back(v);  // in vertex order, as the search orders equal-cost links
    }
  }
  if (leaves.size() < 2 || spines.empty()) return;
  spine_count_ = spines.size();
  constexpr uint32_t kNone = UINT32_MAX;
  leaf_up_.assign(leaves.size() * spine_count_, kNone);
  leaf_down_.assign(leaves.size() * spine_count_, kNone);
  double bw = -1;
  auto fail = [&] {
    leaf_up_.clear(), leaf_down_.clear(), leaf_of_vertex_.clear();
    spine_count_ = 0;
  };
  for (const Link& l : links_) {
    const bool a_sw = graph_[l.src].kind == VertexKind::Switch, b_sw = graph_[l.dst].kind == VertexKind::Switch;
    if (!a_sw || !b_sw) continue;
    if (bw < 0) bw = l.bandwidth;
    if (l.bandwidth != bw) return fail();
    uint32_t* slot = nullptr;
    if (leaf_of_vertex_[l.src] >= 0 && spine_of[l.dst] >= 0)
      slot =
          &leaf_up_[static_cast<size_t>(leaf_of_vertex_[l.src]) * spine_count_ + static_cast<size_t>(spine_of[l.dst])];
    else if (spine_of[l.src] >= 0 && leaf_of_vertex_[l.dst] >= 0)
      slot = &leaf_down_[static_cast<size_t>(leaf_of_vertex_[l.dst]) * spine_count_ +
                         static_cast<size_t>(spine_of[l.src])];
    else
      return fail();                    // leaf to leaf or spine to spine: not two tiers
    if (*slot != kNone) return fail();  // parallel links
    *slot = l.id;
  }
  for (size_t i = 0; i < leaf_up_.size(); ++i)
    if (leaf_up_[i] == kNone || leaf_down_[i] == kNone) return fail();
  two_tier_ = true;
}

void Topology::fast_route(int src, int dst, std::vector<uint32_t>& path) {
  const int g = spec_.node.gpus;
  const int na = node_of(src), nb = node_of(dst), la = src % g, lb = dst % g;
  const size_t nics = static_cast<size_t>(spec_.node.nics);
  const size_t nic_b = static_cast<size_t>(nb) * nics + static_cast<size_t>(preferred_nic_local(lb));
  size_t nic_a = static_cast<size_t>(na) * nics + static_cast<size_t>(preferred_nic_local(la));
  const std::vector<uint32_t>* exit = &exit_template_[static_cast<size_t>(la)];
  if (rail_pairs_only_ && nic_switch_[nic_a] != nic_switch_[nic_b]) {
    const int k = rail_exit_nic(src, dst);
    nic_a = static_cast<size_t>(na) * nics + static_cast<size_t>(k);
    exit = &tied_exit_[static_cast<size_t>(la)][static_cast<size_t>(k)];
  }
  path.clear();
  for (uint32_t l : *exit) path.push_back(l + node_link_base_[static_cast<size_t>(na)]);
  path.push_back(nic_up_[nic_a]);
  const uint32_t sa = nic_switch_[nic_a], sb = nic_switch_[nic_b];
  if (sa != sb && two_tier_) {
    const size_t leaf_a = static_cast<size_t>(leaf_of_vertex_[sa]), leaf_b = static_cast<size_t>(leaf_of_vertex_[sb]);
    const size_t spine = spine_count_ == 1 ? 0 : static_cast<size_t>(nic_b) % spine_count_;
    path.push_back(leaf_up_[leaf_a * spine_count_ + spine]);
    path.push_back(leaf_down_[leaf_b * spine_count_ + spine]);
  } else if (sa != sb) {
    auto it = switch_trees_.find(sa);
    if (it == switch_trees_.end()) {
      // Dijkstra over switches only, from sa, keeping every equal-cost predecessor; its
      // state is indexed by switch, so a tree costs O(switch links), not O(vertices).
      if (switch_index_.empty()) {
        switch_index_.assign(boost::num_vertices(graph_), -1);
        for (size_t v = 0; v < switch_index_.size(); ++v)
          if (graph_[v].kind == VertexKind::Switch) switch_index_[v] = static_cast<int32_t>(switch_count_++);
        switch_edges_.resize(switch_count_);
        for (size_t v = 0; v < switch_index_.size(); ++v) {
          if (switch_index_[v] < 0) continue;
          for (uint32_t id : out_links(static_cast<uint32_t>(v))) {
            const Link& l = links_[id];
            if (switch_index_[l.dst] >= 0)
              switch_edges_[static_cast<size_t>(switch_index_[v])].push_back(
                  SwitchEdge{l.id, l.dst, switch_index_[l.dst], std::llround(1e18 / l.bandwidth)});
          }
        }
      }
      constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
      std::vector<int64_t> dist(switch_count_, kInf);
      thread_local std::vector<std::vector<uint32_t>> pred;  // per switch, emptied below
      if (pred.size() < switch_count_) pred.resize(switch_count_);
      using Item = std::pair<int64_t, uint32_t>;
      std::priority_queue<Item, std::vector<Item>, std::greater<>> pq;
      dist[static_cast<size_t>(switch_index_[sa])] = 0;
      pq.push({0, sa});
      while (!pq.empty()) {
        auto [d, v] = pq.top();
        pq.pop();
        if (d != dist[static_cast<size_t>(switch_index_[v])]) continue;
        for (const SwitchEdge& se : switch_edges_[static_cast<size_t>(switch_index_[v])]) {
          const size_t w = static_cast<size_t>(se.dst);
          const int64_t c = d + se.cost;
          if (c < dist[w]) {
            dist[w] = c;
            pred[w].assign(1, se.link);
            pq.push({c, se.dst_vertex});
          } else if (c == dist[w]) {
            pred[w].push_back(se.link);
          }
        }
      }
      SwitchTree tree;
      tree.set.resize(switch_count_);
      if (last_set_.size() < switch_count_) last_set_.resize(switch_count_, UINT32_MAX);
      auto same = [&](const std::vector<uint32_t>& p, uint32_t k) {
        return std::equal(p.begin(), p.end(), pred_links_.begin() + pred_first_[k],
                          pred_links_.begin() + pred_first_[k + 1]);
      };
      for (size_t w = 0; w < switch_count_; ++w) {
        auto& p = pred[w];
        // Switches leave the queue by (distance, vertex), so a set is usually in order already.
        const auto by_src = [&](uint32_t a, uint32_t b) { return links_[a].src < links_[b].src; };
        if (!std::is_sorted(p.begin(), p.end(), by_src)) std::sort(p.begin(), p.end(), by_src);
        if (last_set_[w] != UINT32_MAX && same(p, last_set_[w])) {
          tree.set[w] = last_set_[w];
          p.clear();
          continue;
        }
        uint64_t h = p.size();
        for (uint32_t l : p) h = mix(h ^ l);
        auto& ids = pred_sets_by_hash_[h];
        uint32_t id = UINT32_MAX;
        for (uint32_t k : ids)
          if (same(p, k)) {
            id = k;
            break;
          }
        if (id == UINT32_MAX) {
          id = static_cast<uint32_t>(pred_first_.size() - 1);
          pred_links_.insert(pred_links_.end(), p.begin(), p.end());
          pred_first_.push_back(static_cast<uint32_t>(pred_links_.size()));
          ids.push_back(id);
        }
        tree.set[w] = last_set_[w] = id;
        p.clear();
      }
      it = switch_trees_.emplace(sa, std::move(tree)).first;
    }
    std::vector<uint32_t> middle;
    const uint64_t key = nic_b;  // destination-mod-k, as in shortest_path()
    const SwitchTree& tree = it->second;
    for (uint32_t v = sb; v != sa;) {
      const uint32_t k = tree.set[static_cast<size_t>(switch_index_[v])];
      const std::span<const uint32_t> choices(pred_links_.data() + pred_first_[k], pred_first_[k + 1] - pred_first_[k]);
      if (choices.empty()) throw std::runtime_error("topology: no switch path to " + graph_[sb].name);
      const uint32_t link = choices[choices.size() == 1 ? 0 : key % choices.size()];
      middle.push_back(link);
      v = links_[link].src;
    }
    path.insert(path.end(), middle.rbegin(), middle.rend());
  }
  path.push_back(nic_down_[nic_b]);
  for (uint32_t l : enter_template_[static_cast<size_t>(lb)])
    path.push_back(l + node_link_base_[static_cast<size_t>(nb)]);
}

}  // namespace clustersim
