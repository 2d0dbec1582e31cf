// Topology's routes between GPUs (topology/topology.h): the shortest-path search over the graph, ECMP
// among equal paths, the route table, and the rings inside a node's mesh.
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

std::vector<uint32_t> Topology::shortest_path(uint32_t src, uint32_t dst, bool prune, bool* unique, bool node_only,
                                              int64_t max_cost) const {
  // Dijkstra on integer serialization cost (attoseconds per byte) so equal-cost paths
  // compare exactly; every equal-cost predecessor edge is kept for ECMP.
  const size_t nv = boost::num_vertices(graph_);
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
  // Distances and predecessors live across calls (per thread), and only the vertices a
  // search reached are reset: a search inside a node stops within a few hops, and
  // clearing arrays over the whole cluster for each pair made routing quadratic.
  thread_local std::vector<int64_t> dist;
  thread_local std::vector<std::vector<uint32_t>> pred;
  thread_local std::vector<uint32_t> reached;
  if (dist.size() < nv) dist.resize(nv, kInf), pred.resize(nv);
  struct Reset {
    ~Reset() {
      for (uint32_t v : reached) dist[v] = kInf, pred[v].clear();
      reached.clear();
    }
  } reset;
  using Item = std::pair<int64_t, uint32_t>;
  // A binary heap in a vector kept across calls (no allocation per search).
  thread_local std::vector<Item> heap;
  heap.clear();
  auto push = [&](Item it) {
    heap.push_back(it);
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  dist[src] = 0;
  reached.push_back(src);
  push({0, src});
  const int na = graph_[src].node, nb = graph_[dst].node;
  const bool third = prune && prune_third_nics_ && na >= 0 && nb >= 0 && nic_node_.size() == nv;
  const bool spines = prune && !spine_of_vertex_.empty() && na >= 0 && nb >= 0;
  // The leaves a spine may enter: those holding a NIC of either end's node.
  uint32_t leaves[64];
  size_t leaf_count = 0;
  if (spines) {
    const size_t nics = static_cast<size_t>(spec_.node.nics);
    for (int n : {na, nb})
      for (size_t k = 0; k < nics; ++k) {
        const int32_t leaf = leaf_of_vertex_[nic_switch_[static_cast<size_t>(n) * nics + k]];
        if (std::find(leaves, leaves + leaf_count, static_cast<uint32_t>(leaf)) != leaves + leaf_count) continue;
        if (leaf_count == std::size(leaves)) {
          leaf_count = SIZE_MAX;  // too many to list: no spine pruning
          break;
        }
        leaves[leaf_count++] = static_cast<uint32_t>(leaf);
      }
  }
  auto relax = [&](const Link& l, int64_t d) {
    const int64_t c = d + l.cost;
    const uint32_t w = l.dst;
    if (c < dist[w]) {
      if (dist[w] == kInf) reached.push_back(w);
      dist[w] = c;
      pred[w].assign(1, l.id);
      push({c, w});
    } else if (c == dist[w]) {
      pred[w].push_back(l.id);
    }
  };
  const int home = graph_[src].node;
  auto visit = [&](const Link& l, int64_t d) {
    if (node_only && graph_[l.dst].node != home) return;
    if (l.cost > max_cost) return;
    if (third) {
      const int32_t n = nic_node_[l.dst];
      if (n >= 0 && n != na && n != nb) return;
    }
    relax(l, d);
  };
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const auto [d, v] = heap.back();
    heap.pop_back();
    if (d != dist[v]) continue;
    if (d > dist[dst]) break;
    if (v != src && (is_gpu_.size() == nv ? is_gpu_[v] != 0 : graph_[v].kind == VertexKind::Gpu))
      continue;  // GPUs do not forward
    if (spines && leaf_count != SIZE_MAX && spine_of_vertex_[v] >= 0) {
      for (size_t i = 0; i < leaf_count; ++i)
        relax(links_[leaf_down_[leaves[i] * spine_count_ + static_cast<size_t>(spine_of_vertex_[v])]], d);
      continue;
    }
    // A leaf's links go to its NICs and to every spine: only the two ends' NICs matter.
    if (spines && third && leaf_of_vertex_[v] >= 0) {
      const size_t leaf = static_cast<size_t>(leaf_of_vertex_[v]);
      for (size_t sp = 0; sp < spine_count_; ++sp) relax(links_[leaf_up_[leaf * spine_count_ + sp]], d);
      const size_t nics = static_cast<size_t>(spec_.node.nics);
      for (int n : {na, nb}) {
        if (n == nb && na == nb) break;
        for (size_t k = 0; k < nics; ++k) {
          const size_t idx = static_cast<size_t>(n) * nics + k;
          if (nic_switch_[idx] == v) relax(links_[nic_down_[idx]], d);
        }
      }
      continue;
    }
    for (uint32_t l : out_links(v)) visit(links_[l], d);
  }
  if (dist[dst] == kInf && node_only) return {};
  if (dist[dst] == kInf)
    throw std::runtime_error("topology: no route from " + graph_[src].name + " to " + graph_[dst].name);
  std::vector<uint32_t> path;
  const uint64_t h = mix((static_cast<uint64_t>(src) << 32) | dst);
  auto preferred_nic = [&](uint32_t gpu) { return preferred_nic_local(graph_[gpu].node, graph_[gpu].local); };
  std::vector<uint32_t> affine;
  for (uint32_t v = dst; v != src;) {
    const auto& p = pred[v];
    uint32_t link = p[0];
    if (p.size() > 1) {
      if (unique) *unique = false;
      affine.clear();
      for (uint32_t l : p) {
        const VertexProps& a = graph_[links_[l].src];
        const VertexProps& b = graph_[links_[l].dst];
        const VertexProps& nic = a.kind == VertexKind::Nic ? a : b;
        if (nic.kind != VertexKind::Nic) continue;
        const uint32_t end = nic.node == graph_[src].node ? src : dst;
        if (nic.node == graph_[end].node && nic.local == preferred_nic(end)) affine.push_back(l);
      }
      if (affine.size() == 1) {
        link = affine[0];
      } else {
        // Destination-mod-k, as InfiniBand's fat-tree routing does: the spine (or any other
        // tie) is picked by the destination's NIC, so a shift permutation never puts two
        // flows on one link. Candidates are ordered by the vertex they come from.
        std::vector<uint32_t> choices = affine.empty() ? p : affine;
        std::sort(choices.begin(), choices.end(),
                  [&](uint32_t a, uint32_t b) { return links_[a].src < links_[b].src; });
        const uint64_t key = spec_.nodes > 1
                                 ? static_cast<uint64_t>(graph_[dst].node) * static_cast<uint64_t>(spec_.node.nics) +
                                       static_cast<uint64_t>(preferred_nic(dst))
                                 : h;
        link = choices[key % choices.size()];
      }
    }
    path.push_back(link);
    v = links_[link].src;
  }
  std::reverse(path.begin(), path.end());
  return path;
}

void Topology::prefetch_route(int src, int dst) const {
  if (route_slots_.empty()) return;
  const uint64_t key = route_key(src, dst);
  __builtin_prefetch(&route_slots_[mix(key) & (route_slots_.size() - 1)]);
}

const Topology::RouteSlot* Topology::find_route(uint64_t key) const {
  if (route_slots_.empty()) return nullptr;
  const size_t mask = route_slots_.size() - 1;
  for (size_t i = mix(key) & mask;; i = (i + 1) & mask) {
    const RouteSlot& s = route_slots_[i];
    if (s.key == key) return &s;
    if (s.key == ~uint64_t{0}) return nullptr;
  }
}

Route Topology::append_route(int src, int dst, std::vector<uint32_t>& out) {
  if (src == dst) return {};
  const uint64_t key = route_key(src, dst);
  if (find_route(key) == nullptr) {
    if (fast_state_ == 0) prepare_fast_routing();
    if (structured_route(src, dst)) {
      thread_local std::vector<uint32_t> links;
      fast_route(src, dst, links);
      out.insert(out.end(), links.begin(), links.end());
      return Route{{}, route_latency(links), route_class(links)};
    }
  }
  Route r = route_info(src, dst);
  out.insert(out.end(), r.links.begin(), r.links.end());
  r.links = {};
  return r;
}

Route Topology::route_info(int src, int dst) {
  if (src == dst) return {};
  const uint64_t key = route_key(src, dst);
  auto stored = [&](const RouteSlot& s) {
    const uint32_t* at = route_chunks_[s.chunk].data() + s.offset;
    Route r{std::span<const uint32_t>(at, s.length), 0, static_cast<LinkClass>(at[-1])};
    std::memcpy(&r.latency, at - kRouteHeader, sizeof r.latency);
    return r;
  };
  if (const RouteSlot* s = find_route(key)) return stored(*s);
  if (fast_state_ == 0) prepare_fast_routing();
  thread_local std::vector<uint32_t> built;
  if (structured_route(src, dst))
    fast_route(src, dst, built);
  else
    built = searched_route(src, dst, /*prune=*/true);
  const std::vector<uint32_t>& links = built;
  // Store the header and links where they will not move.
  constexpr size_t kChunk = size_t{1} << 16;
  const size_t need = kRouteHeader + links.size();
  if (route_chunks_.empty() || route_chunks_.back().size() + need > route_chunks_.back().capacity()) {
    route_chunks_.emplace_back();
    route_chunks_.back().reserve(std::max(kChunk, need));
  }
  std::vector<uint32_t>& chunk = route_chunks_.back();
  uint32_t header[kRouteHeader];
  const double latency = route_latency(links);
  static_assert(sizeof latency == 2 * sizeof(uint32_t));
  std::memcpy(header, &latency, sizeof latency);
  header[2] = static_cast<uint32_t>(route_class(links));
  chunk.insert(chunk.end(), header, header + kRouteHeader);
  RouteSlot slot{key, static_cast<uint32_t>(route_chunks_.size() - 1), static_cast<uint32_t>(chunk.size()),
                 static_cast<uint32_t>(links.size())};
  chunk.insert(chunk.end(), links.begin(), links.end());
  // At most half full: grow (and re-place every slot) before adding.
  if (2 * (route_count_ + 1) > route_slots_.size()) {
    BigVector<RouteSlot> old(std::max<size_t>(1024, 2 * route_slots_.size()));
    old.swap(route_slots_);
    const size_t mask = route_slots_.size() - 1;
    for (const RouteSlot& s : old)
      if (s.key != ~uint64_t{0}) {
        size_t i = mix(s.key) & mask;
        while (route_slots_[i].key != ~uint64_t{0}) i = (i + 1) & mask;
        route_slots_[i] = s;
      }
  }
  const size_t mask = route_slots_.size() - 1;
  size_t i = mix(key) & mask;
  while (route_slots_[i].key != ~uint64_t{0}) i = (i + 1) & mask;
  route_slots_[i] = slot;
  ++route_count_;
  return stored(slot);
}

std::span<const uint32_t> Topology::switch_route(int gpu, bool to_switch) const {
  const auto& pair = gpu_switch_links_[static_cast<size_t>(gpu)];
  if (pair[0] == kNoLink) return {};
  return {&pair[to_switch ? 0 : 1], 1};
}

Route Topology::switch_route_info(int gpu, bool to_switch) const {
  const auto links = switch_route(gpu, to_switch);
  return Route{links, route_latency(links), route_class(links)};
}

double Topology::gpu_link_bandwidth(int a, int b) const {
  const uint32_t va = gpu_vertex(a), vb = gpu_vertex(b);
  for (uint32_t id : out_links(va)) {
    const Link& l = links_[id];
    if (l.dst == vb) return l.bandwidth;
  }
  return 0;
}

const std::vector<std::vector<int>>& Topology::mesh_rings(int node, const std::vector<int>& locals) const {
  const int build = node_build_[static_cast<size_t>(node)];
  auto [it, fresh] = mesh_rings_.try_emplace({build, locals});
  if (!fresh) return it->second;
  std::vector<std::vector<int>>& rings = it->second;
  const size_t k = locals.size();
  if (k < 3 || k > 8) return rings;
  const int base = build * spec_.node.gpus;  // the build's own node: same wiring
  std::vector<double> lanes(k * k, 0);
  double lane = std::numeric_limits<double>::infinity();
  for (size_t a = 0; a < k; ++a)
    for (size_t b = 0; b < k; ++b) {
      if (a == b) continue;
      const double bw = gpu_link_bandwidth(base + locals[a], base + locals[b]);
      lanes[a * k + b] = bw;
      if (bw > 0) lane = std::min(lane, bw);
    }
  if (!std::isfinite(lane)) return rings;
  std::vector<int> cap(k * k, 0);
  for (size_t e = 0; e < k * k; ++e) cap[e] = static_cast<int>(std::floor(lanes[e] / lane + 1e-9));
  // Every directed Hamiltonian cycle over the links, the first GPU first (rotations are
  // one ring), widest first: the most lanes on its narrowest hop, then in all.
  std::vector<std::vector<size_t>> cycles;
  std::vector<size_t> order(k);
  for (size_t i = 0; i < k; ++i) order[i] = i;
  do {
    bool ok = true;
    for (size_t i = 0; i < k && ok; ++i) ok = cap[order[i] * k + order[(i + 1) % k]] > 0;
    if (ok) cycles.push_back(order);
  } while (std::next_permutation(order.begin() + 1, order.end()));
  auto width = [&](const std::vector<size_t>& c) {
    int least = 1 << 30, sum = 0;
    for (size_t i = 0; i < k; ++i) {
      const int v = cap[c[i] * k + c[(i + 1) % k]];
      least = std::min(least, v);
      sum += v;
    }
    return std::pair{least, sum};
  };
  std::stable_sort(cycles.begin(), cycles.end(), [&](const auto& x, const auto& y) { return width(x) > width(y); });
  // The most rings whose hops together take no more lanes than each link has: a
  // depth-first search over the cycles (each may repeat where lanes allow), bounded by
  // the fewest lanes any GPU has left to send on (every ring takes one from each), and
  // cut off after 10^6 steps with the best packing found so far.
  std::vector<int> left = cap;
  std::vector<size_t> chosen, best;
  int64_t steps = 0;
  auto bound = [&] {
    int least = 1 << 30;
    for (size_t a = 0; a < k; ++a) {
      int out = 0;
      for (size_t b = 0; b < k; ++b) out += left[a * k + b];
      least = std::min(least, out);
    }
    return least;
  };
  auto fits = [&](const std::vector<size_t>& c, int d) {
    bool ok = true;
    for (size_t i = 0; i < k; ++i) {
      int& v = left[c[i] * k + c[(i + 1) % k]];
      v -= d;
      ok = ok && v >= 0;
    }
    return ok;
  };
  auto search = [&](auto&& self, size_t from) -> void {
    if (chosen.size() > best.size()) best = chosen;
    if (chosen.size() >= 16 || ++steps > 1'000'000) return;
    if (chosen.size() + static_cast<size_t>(bound()) <= best.size()) return;
    for (size_t i = from; i < cycles.size(); ++i) {
      if (fits(cycles[i], 1)) {
        chosen.push_back(i);
        self(self, i);
        chosen.pop_back();
      }
      fits(cycles[i], -1);
      if (steps > 1'000'000) return;
    }
  };
  search(search, 0);
  for (size_t i : best) {
    rings.emplace_back();
    for (size_t g : cycles[i]) rings.back().push_back(locals[g]);
  }
  return rings;
}

LinkClass Topology::route_class(std::span<const uint32_t> r) const {
  LinkClass c = LinkClass::NvLink;
  for (uint32_t l : r) {
    const LinkClass k = links_[l].cls;
    if (k == LinkClass::Network) return k;
    if (k == LinkClass::Pcie) c = k;
  }
  return c;
}

int Topology::preferred_nic_local(int node, int local_gpu) const {
  // A GPU's own NIC when there is one per GPU, else the share of NICs it sits in.
  const NodeSpec& ns = spec_.node_at(node);
  return local_gpu * ns.nics / std::max(1, ns.gpus);
}

std::vector<uint32_t> Topology::route_by_search(int src, int dst) const {
  if (src == dst) return {};
  return searched_route(src, dst, /*prune=*/false);
}

std::vector<uint32_t> Topology::searched_route(int src, int dst, bool prune) const {
  // Two GPUs of one node talk inside it (NCCL's P2P over NVLink or PCIe, or shared memory),
  // never out through a NIC and back, over the widest path there: NCCL's search takes the
  // bandwidth it can reach before the kind of path. The least cost alone took two NVLink hops
  // of 32 GB/s over a PCIe path of twice that, where 30 GB/s took the PCIe path, and a step
  // was 73 % longer with the faster NVLink. Each search admits only links wider than the last
  // path's slowest; the last path found is the widest, and the least costly among the widest.
  if (node_of(src) == node_of(dst)) {
    std::vector<uint32_t> widest;
    int64_t below = std::numeric_limits<int64_t>::max();
    for (;;) {
      std::vector<uint32_t> p = shortest_path(gpu_vertex(src), gpu_vertex(dst), prune, nullptr, true, below);
      if (p.empty()) break;
      int64_t slowest = 0;
      for (uint32_t l : p) slowest = std::max(slowest, links_[l].cost);
      widest = std::move(p);
      if (slowest == 0) break;
      below = slowest - 1;
    }
    if (!widest.empty()) return widest;
  }
  return shortest_path(gpu_vertex(src), gpu_vertex(dst), prune);
}

}  // namespace clustersim
