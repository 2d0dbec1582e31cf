#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "cost_models/flow_network.h"
#include "cost_models/maxmin.h"
#include "cost_models/network.h"
#include "cost_models/tuner.h"
#include "support/clusters.h"
#include "topology/presets.h"

namespace clustersim {
namespace {

// ---- the max-min solver -------------------------------------------------------------

TEST(MaxMin, EqualFlowsSplitALinkEvenly) {
  MaxMinSystem s;
  const auto link = s.add_constraint(100);
  std::vector<MaxMinSystem::Id> v;
  for (int i = 0; i < 4; ++i) v.push_back(s.add_variable(std::vector<MaxMinSystem::Id>{link}));
  s.solve();
  for (auto x : v) EXPECT_DOUBLE_EQ(s.rate(x), 25);
  s.remove_variable(v[0]);
  s.solve();
  EXPECT_NEAR(s.rate(v[1]), 100.0 / 3, 1e-9);
}

// A crosses links 1 and 2, B only link 2: A is held to C1 by link 1, and B takes what
// is left of link 2 (not merely half of it).
TEST(MaxMin, ALeftoverGoesToTheFlowThatCanUseIt) {
  MaxMinSystem s;
  const auto l1 = s.add_constraint(10), l2 = s.add_constraint(100);
  const auto a = s.add_variable(std::vector<MaxMinSystem::Id>{l1, l2});
  const auto b = s.add_variable(std::vector<MaxMinSystem::Id>{l2});
  s.solve();
  EXPECT_DOUBLE_EQ(s.rate(a), 10);
  EXPECT_DOUBLE_EQ(s.rate(b), 90);
}

TEST(MaxMin, WeightsAndBounds) {
  MaxMinSystem s;
  const auto l = s.add_constraint(90);
  const auto heavy = s.add_variable(std::vector<MaxMinSystem::Id>{l}, 2.0);
  const auto light = s.add_variable(std::vector<MaxMinSystem::Id>{l}, 1.0);
  s.solve();
  EXPECT_DOUBLE_EQ(s.rate(heavy), 60);  // twice the weight, twice the share
  EXPECT_DOUBLE_EQ(s.rate(light), 30);
  const auto capped = s.add_variable(std::vector<MaxMinSystem::Id>{l}, 1.0, 5.0);
  s.solve();
  EXPECT_DOUBLE_EQ(s.rate(capped), 5);
  EXPECT_NEAR(s.rate(heavy) + s.rate(light), 85, 1e-9);
}

// Variables leave in any order, from the middle of a link's list or its end, and a link
// that one crosses twice counts it twice; what stays is solved as if it had always been
// alone, and a link's usage is the sum of its remaining rates.
TEST(MaxMin, RemovalKeepsEveryLinkListExact) {
  MaxMinSystem s;
  const auto a = s.add_constraint(12), b = s.add_constraint(30);
  using R = std::vector<MaxMinSystem::Id>;
  const auto v0 = s.add_variable(R{a}), v1 = s.add_variable(R{a, b}), v2 = s.add_variable(R{b, a, b});
  const auto v3 = s.add_variable(R{b});
  s.solve();
  EXPECT_NEAR(s.usage(a), 12, 1e-9);
  s.remove_variable(v0);  // first in a's list
  s.remove_variable(v0);  // a second removal is a no-op
  s.solve();
  EXPECT_NEAR(s.rate(v1), 6, 1e-9);
  EXPECT_NEAR(s.rate(v2), 6, 1e-9);   // a: 12 shared by v1 and v2
  EXPECT_NEAR(s.rate(v3), 12, 1e-9);  // b: 30 less v1's 6 and v2's 2 x 6
  EXPECT_NEAR(s.usage(b), 30, 1e-9);
  s.remove_variable(v2);  // crosses b twice
  s.solve();
  EXPECT_NEAR(s.rate(v1), 12, 1e-9);
  EXPECT_NEAR(s.rate(v3), 18, 1e-9);
  EXPECT_NEAR(s.usage(b), 30, 1e-9);
  s.remove_variable(v1);
  s.remove_variable(v3);
  s.solve();
  EXPECT_EQ(s.usage(a), 0);
  EXPECT_EQ(s.usage(b), 0);
  const auto v4 = s.add_variable(R{b, a});  // reuses a freed slot
  s.solve();
  EXPECT_NEAR(s.rate(v4), 12, 1e-9);
  EXPECT_EQ(s.live_variables(), 1u);
}

// The solver takes a shortcut for a flow alone on its links; it must give what the
// progressive filling gives: the narrowest link (a link crossed twice counts twice) or
// the flow's own bound.
TEST(MaxMin, AFlowAloneOnItsLinksGetsItsNarrowestLinkOrItsBound) {
  MaxMinSystem s;
  for (double c : {10.0, 4.0, 7.0, 5.0, 9.0, 8.0}) s.add_constraint(c);
  const std::vector<MaxMinSystem::Id> three = {0, 1, 2}, one = {3}, weighted = {4}, twice = {5, 5};
  const auto a = s.add_variable(three), b = s.add_variable(one, 1.0, 2.0), c = s.add_variable(weighted, 3.0),
             d = s.add_variable(twice);
  s.solve();
  EXPECT_DOUBLE_EQ(s.rate(a), 4.0);
  EXPECT_DOUBLE_EQ(s.rate(b), 2.0);
  EXPECT_DOUBLE_EQ(s.rate(c), 9.0);
  EXPECT_DOUBLE_EQ(s.rate(d), 4.0);
  EXPECT_DOUBLE_EQ(s.usage(1), 4.0);
  EXPECT_DOUBLE_EQ(s.usage(0), 4.0);
  EXPECT_DOUBLE_EQ(s.usage(5), 8.0);
}

// Lists past their inline room (a link's first 8 flows, a flow's first 8 links) move to
// the heap and keep every entry.
TEST(MaxMin, LongListsKeepEveryEntry) {
  MaxMinSystem s;
  std::vector<MaxMinSystem::Id> route;
  for (int l = 0; l < 20; ++l) route.push_back(s.add_constraint(l == 0 ? 60.0 : 1000.0 + l));
  std::vector<MaxMinSystem::Id> flows;
  for (int f = 0; f < 40; ++f) flows.push_back(s.add_variable(route));
  std::mt19937 rng(3);
  while (!flows.empty()) {
    s.solve();
    for (auto f : flows) EXPECT_DOUBLE_EQ(s.rate(f), 60.0 / static_cast<double>(flows.size()));
    EXPECT_NEAR(s.usage(0), 60.0, 1e-9);
    const size_t i = rng() % flows.size();
    s.remove_variable(flows[i]);
    flows.erase(flows.begin() + static_cast<std::ptrdiff_t>(i));
  }
  s.solve();
  EXPECT_EQ(s.live_variables(), 0u);
  EXPECT_EQ(s.usage(0), 0.0);
}

// Components of many flows are filled through a heap of shares; the same systems with a
// bound on every flow (too large to bind) take the plain filling. Same rates to the bit.
TEST(MaxMin, HeapFillingEqualsThePlainFilling) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 30; ++trial) {
    MaxMinSystem heap, plain;
    const int links = 8 + static_cast<int>(rng() % 200);
    for (int l = 0; l < links; ++l) {
      const double c = 1e9 + static_cast<double>(rng() % 1000) * 1e6;
      heap.add_constraint(c);
      plain.add_constraint(c);
    }
    std::vector<MaxMinSystem::Id> hv, pv;
    const int flows = 32 + static_cast<int>(rng() % 400);
    for (int f = 0; f < flows; ++f) {
      std::vector<MaxMinSystem::Id> r;
      for (int k = 0, n = 1 + static_cast<int>(rng() % 5); k < n; ++k)
        r.push_back(static_cast<MaxMinSystem::Id>(rng() % static_cast<unsigned>(links)));
      const double w = 1.0 + static_cast<double>(rng() % 3);
      hv.push_back(heap.add_variable(r, w));
      pv.push_back(plain.add_variable(r, w, 1e300));
    }
    for (int round = 0; round < 3; ++round) {
      heap.solve();
      plain.solve();
      for (size_t i = 0; i < hv.size(); ++i) ASSERT_EQ(heap.rate(hv[i]), plain.rate(pv[i])) << "trial " << trial;
      for (int l = 0; l < links; ++l)
        ASSERT_EQ(heap.usage(static_cast<MaxMinSystem::Id>(l)), plain.usage(static_cast<MaxMinSystem::Id>(l)));
      for (int k = 0; k < 10 && !hv.empty(); ++k) {  // churn: the incremental path too
        const size_t i = rng() % hv.size();
        heap.remove_variable(hv[i]);
        plain.remove_variable(pv[i]);
        hv.erase(hv.begin() + static_cast<std::ptrdiff_t>(i));
        pv.erase(pv.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
  }
}

// Property: on random systems no link is over capacity, every variable is limited by a
// saturated link on which it has the largest rate (the max-min condition), and an
// incremental solve gives the same rates as solving from scratch.
TEST(MaxMin, RandomSystemsAreFeasibleMaxMinAndIncrementalIsExact) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    MaxMinSystem inc;
    const int links = 2 + static_cast<int>(rng() % 12);
    std::vector<double> cap;
    for (int l = 0; l < links; ++l) cap.push_back(1 + rng() % 100), inc.add_constraint(cap.back());
    std::vector<std::vector<MaxMinSystem::Id>> routes;
    std::vector<MaxMinSystem::Id> vars;
    for (int round = 0; round < 3; ++round) {
      for (int f = 0; f < 6; ++f) {
        std::vector<MaxMinSystem::Id> r;
        for (int l = 0; l < links; ++l)
          if (rng() % 3 == 0) r.push_back(static_cast<MaxMinSystem::Id>(l));
        if (r.empty()) r.push_back(static_cast<MaxMinSystem::Id>(rng() % links));
        routes.push_back(r);
        vars.push_back(inc.add_variable(r));
      }
      if (vars.size() > 4) {
        inc.remove_variable(vars[0]);
        vars.erase(vars.begin());
        routes.erase(routes.begin());
      }
      inc.solve();
    }
    MaxMinSystem fresh;
    for (double c : cap) fresh.add_constraint(c);
    std::vector<MaxMinSystem::Id> fv;
    for (const auto& r : routes) fv.push_back(fresh.add_variable(r));
    fresh.solve();
    for (int l = 0; l < links; ++l)
      EXPECT_LE(inc.usage(static_cast<MaxMinSystem::Id>(l)), cap[static_cast<size_t>(l)] * (1 + 1e-9));
    for (size_t i = 0; i < vars.size(); ++i) {
      EXPECT_NEAR(inc.rate(vars[i]), fresh.rate(fv[i]), 1e-9 * (1 + fresh.rate(fv[i])));
      bool limited = false;
      for (auto l : routes[i]) {
        const bool saturated = inc.usage(l) >= cap[l] * (1 - 1e-9);
        bool largest = true;
        for (size_t j = 0; j < vars.size(); ++j)
          if (std::find(routes[j].begin(), routes[j].end(), l) != routes[j].end() &&
              inc.rate(vars[j]) > inc.rate(vars[i]) * (1 + 1e-9))
            largest = false;
        limited |= saturated && largest;
      }
      EXPECT_TRUE(limited) << "variable " << i << " could grow";
    }
  }
}

// ---- the flow network -----------------------------------------------------------------

ClusterSpec cluster(const char* preset, int nodes) { return testing::preset_cluster(preset, nodes); }
using testing::first_gpus;

// Runs expansions concurrently from time 0 on the flow network; returns each finish time.
std::vector<double> run_flow(Topology& topo, const NetworkProfile& prof, const std::vector<Expansion>& e,
                             const std::vector<std::vector<int32_t>>& gpus) {
  FlowNetwork net(topo, prof);
  for (size_t i = 0; i < e.size(); ++i) net.start(e[i], gpus[i], SimTime::zero());
  std::vector<double> done(e.size(), 0);
  std::vector<uint64_t> fin;
  while (!net.idle()) {
    const SimTime t = net.next_time();
    fin.clear();
    net.advance(t, fin);
    for (uint64_t id : fin) done[id] = t.seconds();
  }
  return done;
}

// Runs collectives that start at given times; returns each one's end, and the network's
// solo steps and merges.
struct Timed {
  double start;
  Expansion e;
  std::vector<int32_t> gpus;
};
std::vector<int64_t> run_timed(Topology& topo, const NetworkProfile& prof, const std::vector<Timed>& jobs, bool solo,
                               uint64_t* solos = nullptr, uint64_t* merged = nullptr) {
  FlowNetwork net(topo, prof);
  net.set_record_usage(false);
  net.set_solo_steps(solo);
  std::vector<int64_t> done(jobs.size(), -1);
  std::vector<uint64_t> id_of, fin;  // network id -> job
  size_t next = 0;
  while (next < jobs.size() || !net.idle()) {
    const SimTime start = next < jobs.size() ? SimTime::from_seconds(jobs[next].start) : SimTime::max();
    const SimTime t = net.next_time();
    if (start <= t) {
      const uint64_t id = net.start(jobs[next].e, jobs[next].gpus, start);
      id_of.resize(id + 1);
      id_of[id] = next++;
      continue;
    }
    fin.clear();
    net.advance(t, fin);
    for (uint64_t id : fin) done[id_of[id]] = t.picoseconds();
  }
  if (solos) *solos = net.solo_steps();
  if (merged) *merged = net.solo_merged();
  return done;
}

// A one-step collective whose links carry nothing else is solved apart from the shared
// system, once per distinct step; a flow that later needs one of its links puts its
// flows, as they stand, into the shared system. Mirrored pipeline sends (the same send
// from every replica, replicas meeting on leaf up-links) started now alone, now over
// one another and over ring all-reduces, end at the picosecond the shared system ends
// them.
TEST(FlowNetwork, SoloStepsEndWhenTheSharedSystemSaysTheyEnd) {
  NetworkProfile prof;
  for (FabricKind fabric : {FabricKind::FatTree, FabricKind::RailOptimized}) {
    ClusterSpec spec = cluster("dgx-h100", 16);
    spec.fabric.kind = fabric;
    spec.fabric.nics_per_leaf = 16;
    Topology topo(spec);
    // Stage s is nodes 4s .. 4s + 3; the send s -> s + 1 goes from every GPU of stage s's
    // first two nodes to the same GPU two stages' nodes on.
    auto send = [&](int s, int dir, double bytes) {
      Expansion e;
      e.base_latency = 1e-6;
      e.steps.emplace_back();
      std::vector<int32_t> gpus;
      for (int n = 0; n < 2; ++n)
        for (int g = 0; g < 8; ++g) {
          const int a = (4 * s + n) * 8 + g, b = (4 * (s + 1) + n) * 8 + g;
          const auto k = static_cast<int32_t>(gpus.size());
          gpus.push_back(dir > 0 ? a : b);
          gpus.push_back(dir > 0 ? b : a);
          e.steps.back().transfers.push_back(Transfer{k, k + 1, bytes});
        }
      return Timed{0, e, gpus};
    };
    std::vector<Timed> jobs;
    double t = 0;
    for (int round = 0; round < 6; ++round)
      for (int s = 0; s < 3; ++s) {
        Timed fwd = send(s, +1, round % 2 ? 32e6 : 8e6), bwd = send(s, -1, 8e6);
        fwd.start = t;
        bwd.start = t + (round % 3 == 0 ? 0.2e-3 : 5e-3);  // over the forward send, or after it
        jobs.push_back(fwd);
        jobs.push_back(bwd);
        t += 2e-3;
      }
    // Ring all-reduces over one rail that start while sends run.
    std::vector<int32_t> rail;
    for (int n = 0; n < 16; ++n) rail.push_back(n * 8 + 3);
    const GroupLayout layout = layout_of(topo, rail);
    for (double at : {1.1e-3, 9.3e-3, 20.7e-3})
      jobs.push_back(Timed{at, expand_collective({CollectiveKind::AllReduce, Algorithm::Ring, Protocol::Simple, 64e6, 0},
                                                 layout, prof),
                           rail});
    std::stable_sort(jobs.begin(), jobs.end(), [](const Timed& a, const Timed& b) { return a.start < b.start; });
    uint64_t solos = 0, merged = 0;
    const auto shared = run_timed(topo, prof, jobs, false);
    const auto apart = run_timed(topo, prof, jobs, true, &solos, &merged);
    EXPECT_GT(solos, 10u) << to_string(fabric);
    EXPECT_GT(merged, 2u) << to_string(fabric);
    ASSERT_EQ(shared.size(), apart.size());
    for (size_t i = 0; i < shared.size(); ++i) {
      EXPECT_GT(shared[i], 0);
      EXPECT_EQ(apart[i], shared[i]) << to_string(fabric) << " job " << i;
    }
    // And without solo steps the plain path ran every flow in the shared system.
    uint64_t none = 1;
    run_timed(topo, prof, jobs, false, &none);
    EXPECT_EQ(none, 0u);
  }
}

TEST(FlowNetwork, TwoTransfersOverOneLinkEachGetHalf) {
  Topology topo(cluster("dgx-h100", 1));
  NetworkProfile prof;
  auto one = [](int32_t src, int32_t dst) {
    Expansion e;
    e.steps.emplace_back();
    e.steps.back().transfers.push_back(Transfer{src, dst, 100e6});
    return e;
  };
  const Expansion a = one(0, 2), b = one(1, 2);
  const std::vector<int32_t> g = first_gpus(8);
  const double alone = run_flow(topo, prof, {a}, {g})[0];
  const auto both = run_flow(topo, prof, {a, b}, {g, g});
  // Both cross GPU 2's NVSwitch down-link: each moves at half its rate. The route through
  // the switch is the one NCCL's step latency was measured over: the figure alone.
  const double lat = prof.hop(LinkClass::NvLink, LatencyFamily::Ring, Protocol::Simple);
  EXPECT_NEAR(alone, lat + 100e6 / 370.8e9, 1e-9);
  EXPECT_NEAR(both[0], lat + 2 * 100e6 / 370.8e9, 1e-9);
  EXPECT_NEAR(both[1], both[0], 1e-12);
}

// Uncontended, the flow network agrees with the analytic one for every algorithm and
// operation it can run, on one node and on 16 nodes.
TEST(FlowNetwork, AgreesWithAnalyticWithinOnePercentWhenUncontended) {
  NetworkProfile prof;
  const CollectiveKind ops[] = {CollectiveKind::AllReduce, CollectiveKind::AllGather, CollectiveKind::ReduceScatter,
                                CollectiveKind::Broadcast, CollectiveKind::Reduce,    CollectiveKind::AllToAll};
  for (int nodes : {1, 16}) {
    Topology topo(cluster("dgx-h100", nodes));
    AnalyticNetwork analytic(topo, prof);
    const int p = 8 * nodes;
    const auto gpus = first_gpus(p);
    const GroupLayout layout = layout_of(topo, gpus);
    int checked = 0;
    for (CollectiveKind op : ops)
      for (Algorithm algo : kAlgorithms)
        for (Protocol proto : {Protocol::LL, Protocol::Simple})
          for (double S : {64.0 * 1024, 256e6}) {
            if (!unsupported_reason(op, algo, layout).empty() || !unsupported_protocol_reason(algo, proto).empty())
              continue;
            const Expansion e = expand_collective(CollectiveRequest{op, algo, proto, S, 3 % p}, layout, prof);
            const double a = analytic.run(e, gpus).seconds;
            const double f = run_flow(topo, prof, {e}, {gpus})[0];
            EXPECT_NEAR(f, a, 0.01 * a) << nodes << " nodes " << to_string(op) << " " << to_string(algo) << " "
                                        << to_string(proto) << " " << S;
            ++checked;
          }
    EXPECT_GT(checked, 30);
  }
}

// Invariant: every byte a collective sends arrives. On the flow network, the bytes the
// links carried over the whole collective equal each transfer's wire bytes times the
// links on its route, summed over transfers and step repeats; and no link ever carried
// more than its capacity.
TEST(FlowNetwork, EveryByteSentIsCarriedAndNoLinkExceedsItsCapacity) {
  NetworkProfile prof;
  Topology topo(cluster("dgx-h100", 2));
  const auto gpus = first_gpus(16);
  const GroupLayout layout = layout_of(topo, gpus);
  TransferPaths paths(topo, prof);
  int checked = 0;
  for (CollectiveKind op : {CollectiveKind::AllReduce, CollectiveKind::AllGather, CollectiveKind::ReduceScatter,
                            CollectiveKind::Broadcast, CollectiveKind::AllToAll})
    for (Algorithm algo : kAlgorithms) {
      if (!unsupported_reason(op, algo, layout).empty()) continue;
      const Expansion e = expand_collective(CollectiveRequest{op, algo, Protocol::Simple, 64e6, 0}, layout, prof);
      double expected = 0;
      for (const CollectiveStep& st : e.steps)
        for (const Transfer& t : st.transfers)
          expected += static_cast<double>(st.repeat) * paths.wire_bytes(t, e) *
                      static_cast<double>(paths.path(t, gpus).links.size());
      FlowNetwork net(topo, prof);
      net.start(e, gpus, SimTime::zero());
      std::vector<uint64_t> done;
      while (!net.idle()) net.advance(net.next_time(), done);
      net.flush_usage();
      double carried = 0;
      net.usage().each([&](const LinkUsage& u) {
        carried += u.bytes;
        const double seconds = static_cast<double>(u.end_ps - u.start_ps) * 1e-12;
        EXPECT_LE(u.bytes, paths.capacity(u.link) * seconds * (1 + 1e-9) + 1e-3) << "link " << u.link;
      });
      EXPECT_NEAR(carried, expected, 1e-6 * expected) << to_string(op) << " " << to_string(algo);
      EXPECT_EQ(done.size(), 1u);
      ++checked;
    }
  EXPECT_GT(checked, 8);
}

// NCCL's crossover: on 16 DGX H100 a small all-reduce is faster on the tree (log-depth
// latency), a large one is not slower on the ring (bandwidth over every NIC).
TEST(Tuner, RingTreeCrossoverOnSixteenNodes) {
  Topology topo(cluster("dgx-h100", 16));
  NetworkProfile prof;
  AnalyticNetwork net(topo, prof);
  const auto gpus = first_gpus(128);
  const GroupLayout layout = layout_of(topo, gpus);
  auto best = [&](Algorithm a, double S) {
    return choose_collective(CollectiveKind::AllReduce, S, layout, gpus, net, prof, a, std::nullopt).predicted_s;
  };
  for (double small : {8.0 * 1024, 64.0 * 1024}) EXPECT_LT(best(Algorithm::Tree, small), best(Algorithm::Ring, small));
  EXPECT_LE(best(Algorithm::Ring, 1024.0 * 1024 * 1024), best(Algorithm::Tree, 1024.0 * 1024 * 1024));
  EXPECT_EQ(
      choose_collective(CollectiveKind::AllReduce, 64.0 * 1024, layout, gpus, net, prof, std::nullopt, std::nullopt)
          .algo,
      Algorithm::Tree);
  EXPECT_EQ(
      choose_collective(CollectiveKind::AllReduce, 1 << 30, layout, gpus, net, prof, std::nullopt, std::nullopt).algo,
      Algorithm::Ring);
}

// Contention: the 8 DP groups of a TP-8 layout (one GPU per node each) all-reducing at
// once on a 2:1 oversubscribed fat-tree share the spine; one group alone does not.
TEST(FlowNetwork, ConcurrentDataParallelGroupsContendOnAnOversubscribedFabric) {
  ClusterSpec c = cluster("dgx-h100", 16);
  c.fabric.nics_per_leaf = 8;  // one node per leaf: every ring hop leaves its leaf
  c.fabric.oversubscription = 2.0;
  Topology topo(c);
  NetworkProfile prof;
  std::vector<std::vector<int32_t>> groups(8);
  for (int j = 0; j < 8; ++j)
    for (int n = 0; n < 16; ++n) groups[static_cast<size_t>(j)].push_back(8 * n + j);
  std::vector<Expansion> e;
  for (const auto& g : groups)
    e.push_back(
        expand_collective(CollectiveRequest{CollectiveKind::AllReduce, Algorithm::Ring, Protocol::Simple, 1e9, 0},
                          layout_of(topo, g), prof));
  const double one = run_flow(topo, prof, {e[0]}, {groups[0]})[0];
  const auto all = run_flow(topo, prof, e, groups);
  const double slowest = *std::max_element(all.begin(), all.end());
  EXPECT_GT(slowest, 1.5 * one);
  // On a non-blocking fabric with destination-mod-k routing the eight rings take eight
  // different spines and do not notice each other.
  ClusterSpec full = c;
  full.fabric.oversubscription = 1.0;
  Topology t2(full);
  const auto all_full = run_flow(t2, prof, e, groups);
  EXPECT_LT(*std::max_element(all_full.begin(), all_full.end()), 1.01 * one);
}

}  // namespace
}  // namespace clustersim
