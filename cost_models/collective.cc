#include "cost_models/collective.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace clustersim {

std::string_view to_string(Algorithm a) {
  switch (a) {
    case Algorithm::Ring:
      return "ring";
    case Algorithm::Tree:
      return "tree";
    case Algorithm::Direct:
      return "direct";
    case Algorithm::HalvingDoubling:
      return "halving-doubling";
    case Algorithm::Hierarchical:
      return "hierarchical";
    case Algorithm::Nvls:
      return "nvls";
  }
  return "?";
}

bool parse_algorithm(std::string_view s, Algorithm& out) {
  for (Algorithm a : kAlgorithms)
    if (s == to_string(a)) {
      out = a;
      return true;
    }
  return false;
}

LatencyFamily latency_family(Algorithm a) {
  if (a == Algorithm::Tree) return LatencyFamily::Tree;
  if (a == Algorithm::Nvls) return LatencyFamily::Nvls;
  return LatencyFamily::Ring;
}

int GroupLayout::nodes() const {
  std::vector<int32_t> n = node;
  std::sort(n.begin(), n.end());
  return static_cast<int>(std::unique(n.begin(), n.end()) - n.begin());
}

int GroupLayout::per_node() const {
  std::vector<int32_t> n = node;
  std::sort(n.begin(), n.end());
  int c = 0;
  for (size_t i = 0, j = 0; i < n.size(); i = j) {
    while (j < n.size() && n[j] == n[i]) ++j;
    if (i == 0)
      c = static_cast<int>(j - i);
    else if (static_cast<int>(j - i) != c)
      return 0;
  }
  return c;
}

namespace {

bool power_of_two(int p) { return p > 0 && (p & (p - 1)) == 0; }

// Members of each node, nodes in order of first appearance, members in group order.
std::vector<std::vector<int32_t>> by_node(const GroupLayout& l) {
  // Sorted by (node, place in group order): each node's run lists its members in order,
  // and the runs' first places order the nodes.
  const auto n = static_cast<size_t>(l.ranks());
  std::vector<std::pair<int32_t, int32_t>> at(n);
  for (size_t j = 0; j < n; ++j) {
    const int32_t i = l.ring.empty() ? static_cast<int32_t>(j) : l.ring[j];
    at[j] = {l.node[static_cast<size_t>(i)], static_cast<int32_t>(j)};
  }
  std::sort(at.begin(), at.end());
  std::vector<std::pair<int32_t, size_t>> runs;  // (first place, start in `at`)
  for (size_t k = 0; k < n; ++k)
    if (k == 0 || at[k].first != at[k - 1].first) runs.emplace_back(at[k].second, k);
  std::sort(runs.begin(), runs.end());
  std::vector<std::vector<int32_t>> out(runs.size());
  for (size_t r = 0; r < runs.size(); ++r)
    for (size_t k = runs[r].second; k < n && at[k].first == at[runs[r].second].first; ++k) {
      const auto j = static_cast<size_t>(at[k].second);
      out[r].push_back(l.ring.empty() ? static_cast<int32_t>(j) : l.ring[j]);
    }
  return out;
}

// Ring orders, one per channel. Across several nodes with g members each, channel k
// enters every node at its k-th member, so the g channels leave each node from g
// different GPUs and spread the inter-node traffic over their NICs (as NCCL's rings
// spread over rails). Otherwise one ring in group order.
std::vector<std::vector<int32_t>> ring_orders(const GroupLayout& l) {
  if (!l.mesh_rings.empty()) return l.mesh_rings;
  const auto nodes = by_node(l);
  const int g = l.per_node();
  std::vector<std::vector<int32_t>> rings;
  if (nodes.size() < 2 || g < 2) {
    if (!l.ring.empty()) return {l.ring};
    rings.emplace_back();
    for (int32_t i = 0; i < l.ranks(); ++i) rings.back().push_back(i);
    return rings;
  }
  for (int k = 0; k < g; ++k) {
    rings.emplace_back();
    for (const auto& members : nodes)
      for (int j = 0; j < g; ++j) rings.back().push_back(members[static_cast<size_t>((k + j) % g)]);
  }
  return rings;
}

// One step in which every ring passes `bytes` to its successor.
CollectiveStep ring_step(const std::vector<std::vector<int32_t>>& rings, double bytes, int64_t repeat) {
  CollectiveStep s;
  s.repeat = repeat;
  s.latency = StepLatency::RingMean;
  for (size_t k = 0; k < rings.size(); ++k) {
    const auto& r = rings[k];
    for (size_t i = 0; i < r.size(); ++i)
      s.transfers.push_back(Transfer{r[i], r[(i + 1) % r.size()], bytes, static_cast<uint16_t>(k)});
  }
  return s;
}

// Rotates each ring so it starts at `root`.
std::vector<std::vector<int32_t>> chains_from(std::vector<std::vector<int32_t>> rings, int32_t root) {
  for (auto& r : rings) std::rotate(r.begin(), std::find(r.begin(), r.end(), root), r.end());
  return rings;
}

int64_t chunks_for(double bytes, const NetworkProfile& prof, Protocol proto) {
  return std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil(bytes / static_cast<double>(prof.protocol(proto).chunk_bytes))));
}

// A pipelined phase over directed edges: (depth + C − 1) rounds, every edge moving one
// chunk per round (the steady state; fill and drain rounds are charged as full ones for
// bandwidth); `path` is the deepest route, whose latencies the first chunk pays.
CollectiveStep pipelined(const std::vector<Transfer>& edges, int depth, int64_t chunks, std::vector<uint32_t> path) {
  CollectiveStep s;
  s.transfers = edges;
  s.repeat = depth + chunks - 1;
  s.latency = StepLatency::Path;
  s.path = std::move(path);
  return s;
}

void shift_steps(std::vector<CollectiveStep>& out, int p, double bytes, int first, int last) {
  for (int k = first; k <= last; ++k) {
    CollectiveStep s;
    for (int i = 0; i < p; ++i) s.transfers.push_back(Transfer{i, (i + k) % p, bytes});
    out.push_back(std::move(s));
  }
}

void btree(int n, int rank, int& up, int& d0, int& d1) {
  int bit = 1;
  for (; bit < n; bit <<= 1)
    if (bit & rank) break;
  if (rank == 0) {
    up = -1;
    d0 = -1;
    d1 = n > 1 ? bit >> 1 : -1;
    return;
  }
  up = (rank ^ bit) | (bit << 1);
  if (up >= n) up = rank ^ bit;
  int low = bit >> 1;
  d0 = low == 0 ? -1 : rank - low;
  d1 = low == 0 ? -1 : rank + low;
  while (d1 >= n) {
    low >>= 1;
    d1 = low == 0 ? -1 : rank + low;
  }
}

}  // namespace

double step_latency(const CollectiveStep& step, const std::vector<double>& lat, double round_data_s) {
  const double r = static_cast<double>(step.repeat);
  switch (step.latency) {
    case StepLatency::Max:
      return 0;
    case StepLatency::RingMean: {
      std::vector<double> sum, count;
      for (size_t i = 0; i < step.transfers.size(); ++i) {
        const size_t ch = step.transfers[i].channel;
        if (sum.size() <= ch) sum.resize(ch + 1, 0.0), count.resize(ch + 1, 0.0);
        sum[ch] += lat[i];
        count[ch] += 1;
      }
      double worst = 0;
      for (size_t ch = 0; ch < sum.size(); ++ch)
        if (count[ch] > 0) worst = std::max(worst, sum[ch] / count[ch]);
      return r * worst;
    }
    case StepLatency::Path: {
      // The first chunk pays every latency along the deepest route. After it, each
      // connection keeps kSlotsInFlight chunks in flight, so a round's hop latency hides
      // behind the data of the chunks ahead of it; only what it exceeds them by shows.
      double along = 0, worst = 0;
      for (uint32_t i : step.path) along += lat[i];
      for (double l : lat) worst = std::max(worst, l);
      const double per_round = std::max(0.0, worst / kSlotsInFlight - round_data_s);
      return along + std::max(0.0, r - static_cast<double>(step.path.size())) * per_round;
    }
  }
  return 0;
}

void double_binary_tree(int n, std::vector<int32_t>& a, std::vector<int32_t>& b) {
  a.assign(static_cast<size_t>(n), -1);
  b.assign(static_cast<size_t>(n), -1);
  int up, d0, d1;
  for (int r = 0; r < n; ++r) {
    btree(n, r, up, d0, d1);
    a[static_cast<size_t>(r)] = up;
  }
  // Second tree: the first shifted by one rank (n even) or mirrored (n odd), so most
  // ranks that are inner nodes of one tree are leaves of the other.
  for (int r = 0; r < n; ++r) {
    const int s = n % 2 == 0 ? (r - 1 + n) % n : n - 1 - r;
    btree(n, s, up, d0, d1);
    b[static_cast<size_t>(r)] = up < 0 ? -1 : (n % 2 == 0 ? (up + 1) % n : n - 1 - up);
  }
}

std::string unsupported_reason(CollectiveKind op, Algorithm algo, const GroupLayout& l) {
  const std::string name = std::string(to_string(op)) + " with " + std::string(to_string(algo));
  switch (algo) {
    case Algorithm::Ring:
      if (op == CollectiveKind::AllToAll) return name + ": all-to-all has no ring schedule, use direct";
      return "";
    case Algorithm::Tree:
      if (op != CollectiveKind::AllReduce) return name + ": the tree algorithm runs all-reduce only (as NCCL's)";
      return "";
    case Algorithm::Direct:
      return "";
    case Algorithm::HalvingDoubling:
      if (op == CollectiveKind::AllToAll) return name + ": all-to-all has no halving-doubling schedule";
      if (!power_of_two(l.ranks()))
        return name + ": needs a power-of-two group, got " + std::to_string(l.ranks()) + " ranks";
      return "";
    case Algorithm::Hierarchical:
      if (op != CollectiveKind::AllReduce && op != CollectiveKind::AllGather && op != CollectiveKind::ReduceScatter)
        return name + ": hierarchical runs all-reduce, all-gather and reduce-scatter";
      if (l.nodes() < 2 || l.per_node() < 1) return name + ": needs a group spread evenly over two or more nodes";
      return "";
    case Algorithm::Nvls:
      if (op != CollectiveKind::AllReduce && op != CollectiveKind::AllGather && op != CollectiveKind::ReduceScatter)
        return name + ": in-switch reduction runs all-reduce, all-gather and reduce-scatter";
      if (!l.nvswitch) return name + ": needs a group whose nodes have an NVSwitch";
      if (!l.nvls) return name + ": this node's NVSwitch has no in-switch reduction (NVLink SHARP: H100 and later)";
      if (l.nodes() > 1) {
        // NCCL's NVLS tree: all-reduce only, on two or more GPUs of every node (one GPU a
        // node has no multicast group to reduce in).
        if (op != CollectiveKind::AllReduce) return name + ": across nodes in-switch reduction runs all-reduce only";
        if (l.per_node() < 2) return name + ": across nodes needs the same two or more GPUs in every node";
      }
      return "";
  }
  return name + ": unknown";
}

Protocol nccl_p2p_protocol(double bytes_per_peer, bool across_nodes) {
  const int channels = across_nodes ? kP2pChannelsAcrossNodes : kP2pChannelsInNode;
  return bytes_per_peer <= channels * kP2pLlThresholdBytes ? Protocol::LL : Protocol::Simple;
}

std::string unsupported_protocol_reason(Algorithm algo, Protocol proto) {
  if (algo == Algorithm::Nvls && proto != Protocol::Simple)
    return "nvls with " + std::string(to_string(proto)) +
           ": in-switch reduction runs the Simple protocol only (as NCCL's)";
  return "";
}

double nvls_chunk_bytes(double bytes, int concurrent_ops) {
  double chunk = 128.0 * 1024;
  const double ops = std::max(1, concurrent_ops);
  if (bytes < 64 * ops * chunk) chunk = 64.0 * 1024;
  if (bytes < 8 * ops * chunk) chunk = 32.0 * 1024;
  if (bytes < 2 * ops * chunk) chunk = 16.0 * 1024;
  return chunk;
}

namespace {

// Keeps, as `path`, the deepest route to a tree's root of any node: the node's own chain
// transfers (none without `chain`), then the transfer of each node on the way up to its
// parent (`edge[v]`; -1 at the root).
void keep_deepest_route(const std::vector<int32_t>& parent, const std::vector<int64_t>& edge,
                        const std::vector<std::vector<uint32_t>>* chain, std::vector<uint32_t>& path, int& depth) {
  for (size_t i = 0; i < parent.size(); ++i) {
    std::vector<uint32_t> route = chain ? (*chain)[i] : std::vector<uint32_t>{};
    for (size_t v = i; parent[v] >= 0; v = static_cast<size_t>(parent[v]))
      route.push_back(static_cast<uint32_t>(edge[v]));
    if (static_cast<int>(route.size()) > depth) {
      depth = static_cast<int>(route.size());
      path = std::move(route);
    }
  }
}

// Up and down a tree at once, chunk by chunk (a chunk goes down once reduced at the root),
// on opposite directions of the links: one pipelined step twice as deep, whose latency
// path is the deepest route up and then down. `beside` rides in the same rounds.
CollectiveStep up_and_down(std::vector<Transfer> up, const std::vector<Transfer>& down, std::vector<uint32_t> path,
                           int depth, int64_t chunks, const std::vector<Transfer>& beside = {}) {
  const size_t n = path.size();
  for (size_t i = 0; i < n; ++i) path.push_back(path[i] + static_cast<uint32_t>(up.size()));
  up.insert(up.end(), down.begin(), down.end());
  up.insert(up.end(), beside.begin(), beside.end());
  return pipelined(up, 2 * depth, chunks, std::move(path));
}

// NCCL's NVLS tree all-reduce across nodes (src/device/all_reduce.h, NCCL_ALGO_NVLS_TREE):
// inside each node the switch reduces the node's GPUs' data (multimem ld_reduce) and
// multicasts the result back (multimem st), as the one-node NVLS does; between nodes a
// double binary tree per local GPU index carries that GPU's 1/g of the node's partial
// sum up and the total down, half on each tree, through the GPU's own NIC. The warp
// groups run the three at once, chunk by chunk: one pipelined step whose rounds move a
// chunk up and down every tree edge and a chunk through the switch for every GPU, with
// the trees' deepest route, up then down, as its latency path.
CollectiveStep nvls_tree_step(const GroupLayout& l, double S, const NetworkProfile& prof, Protocol proto) {
  const auto nodes = by_node(l);
  const int n = static_cast<int>(nodes.size());
  const int g = l.per_node();
  std::vector<int32_t> pa, pb;
  double_binary_tree(n, pa, pb);
  const double per_tree = S / (2.0 * g);
  const int64_t C = chunks_for(per_tree, prof, proto);
  const double c = per_tree / static_cast<double>(C);
  std::vector<Transfer> up, down;
  std::vector<uint32_t> path;
  int depth = 0;
  for (int k = 0; k < g; ++k)
    for (int t = 0; t < 2; ++t) {
      const auto& parent = t == 0 ? pa : pb;
      std::vector<int64_t> edge(static_cast<size_t>(n), -1);  // node i's transfer to its parent
      for (int i = 0; i < n; ++i) {
        const int32_t par = parent[static_cast<size_t>(i)];
        if (par < 0) continue;
        const int32_t a = nodes[static_cast<size_t>(i)][static_cast<size_t>(k)];
        const int32_t b = nodes[static_cast<size_t>(par)][static_cast<size_t>(k)];
        edge[static_cast<size_t>(i)] = static_cast<int64_t>(up.size());
        up.push_back(Transfer{a, b, c});
        down.push_back(Transfer{b, a, c});
      }
      keep_deepest_route(parent, edge, nullptr, path, depth);
    }
  const double through_switch = S / static_cast<double>(C);  // each GPU's share of a round, up and down
  std::vector<Transfer> switch_rounds;
  for (int i = 0; i < l.ranks(); ++i) {
    switch_rounds.push_back(Transfer{i, kSwitch, through_switch});
    switch_rounds.push_back(Transfer{kSwitch, i, through_switch});
  }
  return up_and_down(std::move(up), down, std::move(path), depth, C, switch_rounds);
}

// NCCL's NVLS-tree chunk (src/enqueue.cc): nvlsChunkSize (128 KiB), 64 KiB from four nodes
// up, halved to 64 and 32 KiB below 4 and 1 rounds of it; a round is every channel's
// head moving one chunk.
double nvls_tree_chunk_bytes(double bytes, int concurrent_ops, int nodes) {
  double chunk = nodes >= 4 ? 64.0 * 1024 : 128.0 * 1024;
  const double ops = std::max(1, concurrent_ops);
  if (bytes < 4 * ops * chunk && chunk > 64.0 * 1024) chunk = 64.0 * 1024;
  if (bytes < ops * chunk && chunk > 32.0 * 1024) chunk = 32.0 * 1024;
  return chunk;
}

}  // namespace

Expansion expand_collective(const CollectiveRequest& req, const GroupLayout& l, const NetworkProfile& prof) {
  std::string why = unsupported_reason(req.op, req.algo, l);
  if (why.empty()) why = unsupported_protocol_reason(req.algo, req.proto);
  if (!why.empty()) throw std::invalid_argument(why);
  Expansion e;
  e.family = latency_family(req.algo);
  e.proto = req.proto;
  const int p = l.ranks();
  const double S = req.bytes;
  if (p <= 1 || S <= 0) return e;
  e.base_latency = prof.base(e.family, req.proto);
  auto& steps = e.steps;
  using CK = CollectiveKind;

  switch (req.algo) {
    case Algorithm::Ring: {
      const auto rings = ring_orders(l);
      const double K = static_cast<double>(rings.size());
      switch (req.op) {
        case CK::AllReduce:
          steps.push_back(ring_step(rings, S / (K * p), 2 * static_cast<int64_t>(p - 1)));
          break;
        case CK::AllGather:
        case CK::ReduceScatter:
          steps.push_back(ring_step(rings, S / (K * p), p - 1));
          break;
        case CK::Broadcast:
        case CK::Reduce: {
          // A pipelined chain from (or to) the root on each channel.
          const auto chains = chains_from(rings, req.root);
          const int64_t C = chunks_for(S / K, prof, req.proto);
          std::vector<Transfer> edges;
          std::vector<uint32_t> path;
          for (size_t k = 0; k < chains.size(); ++k) {
            const auto& c = chains[k];
            for (size_t i = 0; i + 1 < c.size(); ++i) {
              if (k == 0) path.push_back(static_cast<uint32_t>(edges.size()));
              edges.push_back(req.op == CK::Broadcast ? Transfer{c[i], c[i + 1], S / K / static_cast<double>(C)}
                                                      : Transfer{c[i + 1], c[i], S / K / static_cast<double>(C)});
            }
          }
          steps.push_back(pipelined(edges, p - 1, C, std::move(path)));
          break;
        }
        default:
          break;
      }
      break;
    }
    case Algorithm::Tree: {
      // NCCL's tree: a chain inside each node, and a double binary tree across the nodes'
      // chain heads; half of a channel's data on each tree. Across several nodes there is
      // one channel per member of a node, channel k's chains starting at the k-th member,
      // so the channels' trees leave each node through different GPUs and NICs. Reduce up
      // the trees, then broadcast down, both pipelined in chunks.
      const auto nodes = by_node(l);
      const int n = static_cast<int>(nodes.size());
      std::vector<int32_t> pa, pb;
      double_binary_tree(n, pa, pb);
      const int trees = n > 1 ? 2 : 1;
      const int g = l.per_node();
      const int channels = n > 1 && g > 1 ? g : 1;
      const double per_tree = S / (trees * channels);
      const int64_t C = chunks_for(per_tree, prof, req.proto);
      const double c = per_tree / static_cast<double>(C);
      std::vector<Transfer> up, down;
      std::vector<uint32_t> path;
      int depth = 0;
      for (int k = 0; k < channels; ++k)
        for (int t = 0; t < trees; ++t) {
          const auto& parent = t == 0 ? pa : pb;
          // head[i]: the transfer from node i's chain head to its parent's; chain[i]: the
          // node's chain transfers, head-most last.
          std::vector<int64_t> head(static_cast<size_t>(n), -1);
          std::vector<std::vector<uint32_t>> chain(static_cast<size_t>(n));
          auto member = [&](int i, size_t j) {
            const auto& m = nodes[static_cast<size_t>(i)];
            return m[(j + static_cast<size_t>(k)) % m.size()];
          };
          for (int i = 0; i < n; ++i) {
            const size_t size = nodes[static_cast<size_t>(i)].size();
            for (size_t j = size - 1; j >= 1; --j) {
              chain[static_cast<size_t>(i)].push_back(static_cast<uint32_t>(up.size()));
              up.push_back(Transfer{member(i, j), member(i, j - 1), c});
              down.push_back(Transfer{member(i, j - 1), member(i, j), c});
            }
            const int32_t par = parent[static_cast<size_t>(i)];
            if (par < 0) continue;
            head[static_cast<size_t>(i)] = static_cast<int64_t>(up.size());
            up.push_back(Transfer{member(i, 0), member(par, 0), c});
            down.push_back(Transfer{member(par, 0), member(i, 0), c});
          }
          // The deepest route: a node's whole chain, then tree edges up to the root.
          keep_deepest_route(parent, head, &chain, path, depth);
        }
      steps.push_back(up_and_down(std::move(up), down, std::move(path), depth, C));
      break;
    }
    case Algorithm::Direct: {
      // Every rank sends each peer its S/p share: one shift at a time, or, inside a mesh
      // node, all at once, each on its pair's route (as an all-to-all's grouped sends run; a
      // reduce-scatter's and an all-gather's shares are the same bytes). A pair without a
      // link of its own (DGX-1's cube mesh) shares the links its route takes.
      auto exchange = [&] {
        if (l.mesh_rings.empty()) {
          shift_steps(steps, p, S / p, 1, p - 1);
          return;
        }
        CollectiveStep s;
        for (int i = 0; i < p; ++i)
          for (int k = 1; k < p; ++k) s.transfers.push_back(Transfer{i, (i + k) % p, S / p});
        steps.push_back(std::move(s));
      };
      switch (req.op) {
        case CK::AllReduce:
          exchange();  // reduce-scatter
          exchange();  // all-gather
          break;
        case CK::AllToAll:
        case CK::AllGather:
        case CK::ReduceScatter:
          exchange();
          break;
        case CK::Broadcast:
        case CK::Reduce: {
          CollectiveStep s;
          for (int i = 0; i < p; ++i)
            if (i != req.root)
              s.transfers.push_back(req.op == CK::Broadcast ? Transfer{req.root, i, S} : Transfer{i, req.root, S});
          steps.push_back(std::move(s));
          break;
        }
      }
      break;
    }
    case Algorithm::HalvingDoubling: {
      int lg = 0;
      while ((1 << lg) < p) ++lg;
      auto exchange = [&](int distance, double bytes) {
        CollectiveStep s;
        for (int i = 0; i < p; ++i) s.transfers.push_back(Transfer{i, i ^ distance, bytes});
        steps.push_back(std::move(s));
      };
      auto halving = [&] {  // reduce-scatter: halve the data, halve the distance
        for (int k = 0; k < lg; ++k) exchange(p >> (k + 1), S / (1 << (k + 1)));
      };
      auto doubling = [&] {  // all-gather: double the distance and the data
        for (int k = 0; k < lg; ++k) exchange(1 << k, S * (1 << k) / p);
      };
      switch (req.op) {
        case CK::AllReduce:
          halving();
          doubling();
          break;
        case CK::ReduceScatter:
          halving();
          break;
        case CK::AllGather:
          doubling();
          break;
        case CK::Broadcast:
        case CK::Reduce:
          // Binomial tree relative to the root: lg p steps of the whole message.
          for (int k = 0; k < lg; ++k) {
            const int d = req.op == CK::Broadcast ? 1 << k : 1 << (lg - 1 - k);
            CollectiveStep s;
            for (int v = 0; v < d; ++v) {
              const int a = (v + req.root) % p, b = (v + d + req.root) % p;
              s.transfers.push_back(req.op == CK::Broadcast ? Transfer{a, b, S} : Transfer{b, a, S});
            }
            steps.push_back(std::move(s));
          }
          break;
        default:
          break;
      }
      break;
    }
    case Algorithm::Hierarchical: {
      const auto nodes = by_node(l);
      const int g = l.per_node(), n = static_cast<int>(nodes.size());
      std::vector<std::vector<int32_t>> intra(nodes.begin(), nodes.end()), inter(static_cast<size_t>(g));
      for (const auto& m : nodes)
        for (int j = 0; j < g; ++j) inter[static_cast<size_t>(j)].push_back(m[static_cast<size_t>(j)]);
      if (req.op == CK::AllReduce || req.op == CK::ReduceScatter)
        if (g > 1) steps.push_back(ring_step(intra, S / g, g - 1));
      if (req.op == CK::AllReduce)
        steps.push_back(ring_step(inter, S / (static_cast<double>(g) * n), 2 * static_cast<int64_t>(n - 1)));
      else
        steps.push_back(ring_step(inter, S / (static_cast<double>(g) * n), n - 1));
      if (req.op == CK::AllReduce || req.op == CK::AllGather)
        if (g > 1) steps.push_back(ring_step(intra, S / g, g - 1));
      break;
    }
    case Algorithm::Nvls: {
      // The switch reduces (multimem ld_reduce) and multicasts (multimem st). All-reduce
      // pipelines the two: each GPU pushes its (p−1)/p·S of contributions plus its S/p
      // reduced shard up, and receives its S/p shard plus the (p−1)/p·S others down.
      // Inside one node an all-reduce is a pipeline of rounds: each round every channel's
      // head moves one chunk through the three warp groups, so the first round's scatter
      // and the last round's gather run alone. The fill and drain cost (stages − 1)
      // rounds at the collective's rate: a message of few rounds (NCCL shrinks the chunk
      // with the message, but not below 16 KiB) runs well below the peak. Every round but
      // the last is full (the kernel's loop steps by whole rounds), so the pipeline's
      // critical path is the bytes plus (stages − 1) of its largest round: min(S, round).
      if (l.nodes() > 1) {
        // The rounds' fill and drain as inside a node (below), over the tree's rounds:
        // (stages − 1) rounds of each GPU's share through the switch before the pipeline.
        const int ops = l.nvls_channels * l.per_node();
        const double round = ops * nvls_tree_chunk_bytes(S, ops, l.nodes());
        const double fill = (kNvlsPipelineStages - 1) * std::min(S, round);
        CollectiveStep f;
        for (int i = 0; i < p; ++i) {
          f.transfers.push_back(Transfer{i, kSwitch, fill});
          f.transfers.push_back(Transfer{kSwitch, i, fill});
        }
        steps.push_back(std::move(f));
        steps.push_back(nvls_tree_step(l, S, prof, req.proto));
        break;
      }
      // All-gather and reduce-scatter pass two warp groups, so their fill is one round. NCCL
      // picks their chunk by the whole message's bytes over channels x heads, as the
      // all-reduce's, and a round moves each GPU's share of that: the fill is the same
      // fraction of each direction's bytes.
      const int ops = l.nvls_channels * p;
      const double round = ops * nvls_chunk_bytes(S, ops);
      const int stages = req.op == CK::AllReduce ? kNvlsPipelineStages : kNvlsGatherScatterStages;
      const double fill = S > 0 ? (stages - 1) * std::min(S, round) / S : 0;
      CollectiveStep s;
      const double up =
          (1 + fill) * (req.op == CK::AllReduce ? S : (req.op == CK::AllGather ? S / p : S * (p - 1) / p));
      const double down =
          (1 + fill) * (req.op == CK::AllReduce ? S : (req.op == CK::AllGather ? S * (p - 1) / p : S / p));
      for (int i = 0; i < p; ++i) {
        s.transfers.push_back(Transfer{i, kSwitch, up});
        s.transfers.push_back(Transfer{kSwitch, i, down});
      }
      steps.push_back(std::move(s));
      break;
    }
  }
  return e;
}

Expansion expand_all_to_allv(const std::vector<std::vector<double>>& bytes, Protocol proto,
                             const NetworkProfile& prof) {
  Expansion e;
  e.proto = proto;
  const int p = static_cast<int>(bytes.size());
  if (p <= 1) return e;
  e.base_latency = prof.base(LatencyFamily::Ring, proto);
  for (int k = 1; k < p; ++k) {
    CollectiveStep s;
    for (int i = 0; i < p; ++i) {
      const int j = (i + k) % p;
      if (bytes[static_cast<size_t>(i)].size() != static_cast<size_t>(p))
        throw std::invalid_argument("all-to-allv: the byte matrix must be square");
      const double b = bytes[static_cast<size_t>(i)][static_cast<size_t>(j)];
      if (b > 0) s.transfers.push_back(Transfer{i, j, b});
    }
    if (!s.transfers.empty()) e.steps.push_back(std::move(s));
  }
  return e;
}

Expansion expand_sendrecv(int p, double bytes, Protocol proto, const NetworkProfile& prof) {
  Expansion e;
  e.proto = proto;
  if (p <= 1 || bytes <= 0) return e;
  e.base_latency = prof.base(LatencyFamily::Ring, proto);
  shift_steps(e.steps, p, bytes, 1, 1);
  return e;
}

double closed_form_seconds(CollectiveKind op, Algorithm algo, int p, double S, double alpha, double B) {
  if (p <= 1 || S <= 0) return 0;
  const double frac = static_cast<double>(p - 1) / p;
  int lg = 0;
  while ((1 << lg) < p) ++lg;
  switch (algo) {
    case Algorithm::Ring:
      if (op == CollectiveKind::AllReduce) return 2.0 * (p - 1) * alpha + 2.0 * frac * S / B;
      return (p - 1) * alpha + frac * S / B;
    case Algorithm::Direct:
      if (op == CollectiveKind::AllReduce) return 2.0 * ((p - 1) * alpha + frac * S / B);
      if (op == CollectiveKind::Broadcast || op == CollectiveKind::Reduce) return alpha + (p - 1) * S / B;
      return (p - 1) * alpha + frac * S / B;
    case Algorithm::HalvingDoubling:
      if (op == CollectiveKind::AllReduce) return 2.0 * lg * alpha + 2.0 * frac * S / B;
      if (op == CollectiveKind::Broadcast || op == CollectiveKind::Reduce) return lg * (alpha + S / B);
      return lg * alpha + frac * S / B;
    default:
      break;
  }
  throw std::invalid_argument("no flat closed form for " + std::string(to_string(algo)));
}

double closed_form_pipelined(int depth, int64_t chunks, double chunk_bytes, int link_load, double alpha,
                             double bandwidth) {
  const double data = link_load * chunk_bytes / bandwidth;
  return depth * alpha + static_cast<double>(depth + chunks - 1) * data +
         static_cast<double>(chunks - 1) * std::max(0.0, alpha / kSlotsInFlight - data);
}

double closed_form_hierarchical(int g, int n, double S, double a1, double b1, double a2, double b2) {
  const double intra = g > 1 ? (g - 1) * a1 + static_cast<double>(g - 1) / g * S / b1 : 0.0;
  return 2 * intra + 2.0 * (n - 1) * a2 + 2.0 * (n - 1) / n * (S / g) / b2;
}

double busbw_factor(CollectiveKind op, int p) {
  switch (op) {
    case CollectiveKind::AllReduce:
      return 2.0 * (p - 1) / p;
    case CollectiveKind::AllGather:
    case CollectiveKind::ReduceScatter:
    case CollectiveKind::AllToAll:
      return static_cast<double>(p - 1) / p;
    case CollectiveKind::Broadcast:
    case CollectiveKind::Reduce:
      return 1.0;
  }
  return 1.0;
}

}  // namespace clustersim
