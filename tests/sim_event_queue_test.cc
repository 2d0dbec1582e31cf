#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "plan/time.h"
#include "sim/event_queue.h"

namespace clustersim {
namespace {

TEST(SimTime, NamedConstructorsArePicoseconds) {
  EXPECT_EQ(SimTime::ns(1).picoseconds(), 1000);
  EXPECT_EQ(SimTime::us(5).picoseconds(), 5'000'000);
  EXPECT_EQ(SimTime::ms(2).picoseconds(), 2'000'000'000);
  EXPECT_EQ(SimTime::s(1).picoseconds(), 1'000'000'000'000);
  // Seconds convert once, rounding to the nearest picosecond.
  EXPECT_EQ(SimTime::from_seconds(1.4e-12).picoseconds(), 1);
  EXPECT_EQ(SimTime::from_seconds(1.6e-12).picoseconds(), 2);
  EXPECT_DOUBLE_EQ(SimTime::us(3).seconds(), 3e-6);
}

TEST(EventQueue, OrdersByTimeThenInsertion) {
  EventQueue<int> q;
  q.push(SimTime::ns(5), 0);
  q.push(SimTime::ns(1), 1);
  q.push(SimTime::ns(5), 2);
  q.push(SimTime::ns(1), 3);
  q.push(SimTime::ns(3), 4);
  std::vector<int> order;
  while (!q.empty()) order.push_back(q.pop().payload);
  EXPECT_EQ(order, (std::vector<int>{1, 3, 4, 0, 2}));
}

// Property: for random schedules the pop order equals a stable sort by time.
TEST(EventQueue, MatchesStableSortOnRandomInput) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 20; ++trial) {
    EventQueue<int> q;
    std::vector<std::pair<int64_t, int>> ref;
    for (int i = 0; i < 1000; ++i) {
      int64_t t = static_cast<int64_t>(rng() % 50);
      q.push(SimTime::ps(t), i);
      ref.emplace_back(t, i);
    }
    std::stable_sort(ref.begin(), ref.end(), [](auto& a, auto& b) { return a.first < b.first; });
    for (const auto& [t, id] : ref) {
      auto ev = q.pop();
      ASSERT_EQ(ev.time.picoseconds(), t);
      ASSERT_EQ(ev.payload, id);
    }
  }
}

TEST(Simulation, ClockNeverGoesBackwards) {
  Simulation<int> sim;
  sim.schedule_at(SimTime::ns(10), 0);
  Simulation<int>::Event ev;
  SimTime last = SimTime::zero();
  int n = 0;
  while (sim.next(ev)) {
    EXPECT_GE(sim.now(), last);
    last = sim.now();
    if (++n < 100) sim.schedule_in(SimTime::ps(n % 3), n);
  }
  EXPECT_EQ(sim.events_processed(), 100u);
}

}  // namespace
}  // namespace clustersim
