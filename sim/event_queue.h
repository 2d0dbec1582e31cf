// A discrete-event queue ordered by (time, sequence). Events scheduled for the same
// instant run in the order they were scheduled, so runs are deterministic. The queue
// is a 4-ary implicit heap over a flat vector: no per-event allocation, cache-friendly
// sift operations. Payloads are small PODs chosen by the user of the queue; there is
// no callback indirection and no global state.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "plan/time.h"

namespace clustersim {

template <typename Payload>
class EventQueue {
 public:
  struct Event {
    SimTime time;
    uint64_t seq;
    Payload payload;
  };

  void push(SimTime t, const Payload& p) {
    heap_.push_back(Event{t, next_seq_++, p});
    sift_up(heap_.size() - 1);
  }

  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  const Event& top() const { return heap_.front(); }

  Event pop() {
    Event out = heap_.front();
    Event last = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) {
      heap_.front() = last;
      sift_down(0);
    }
    return out;
  }

  void reserve(size_t n) { heap_.reserve(n); }

 private:
  static constexpr size_t kArity = 4;

  static bool before(const Event& a, const Event& b) {
    if (a.time != b.time) return a.time < b.time;
    return a.seq < b.seq;
  }

  void sift_up(size_t i) {
    Event e = heap_[i];
    while (i > 0) {
      size_t parent = (i - 1) / kArity;
      if (!before(e, heap_[parent])) break;
      heap_[i] = heap_[parent];
      i = parent;
    }
    heap_[i] = e;
  }

  void sift_down(size_t i) {
    const size_t n = heap_.size();
    Event e = heap_[i];
    for (;;) {
      size_t first = i * kArity + 1;
      if (first >= n) break;
      size_t best = first;
      size_t end = first + kArity < n ? first + kArity : n;
      for (size_t c = first + 1; c < end; ++c)
        if (before(heap_[c], heap_[best])) best = c;
      if (!before(heap_[best], e)) break;
      heap_[i] = heap_[best];
      i = best;
    }
    heap_[i] = e;
  }

  std::vector<Event> heap_;
  uint64_t next_seq_ = 0;
};

// The simulation clock plus its queue. Handlers are plain code in the owner's loop:
//   while (auto ev = sim.next()) handle(*ev);
template <typename Payload>
class Simulation {
 public:
  using Event = typename EventQueue<Payload>::Event;

  SimTime now() const { return now_; }
  uint64_t events_processed() const { return processed_; }

  // Scheduling in the past is a logic error; it is clamped in release builds and
  // asserted in debug builds so time never goes backwards.
  void schedule_at(SimTime t, const Payload& p);
  void schedule_in(SimTime dt, const Payload& p) { schedule_at(now_ + dt, p); }

  bool next(Event& out) {
    if (queue_.empty()) return false;
    out = queue_.pop();
    now_ = out.time;
    ++processed_;
    return true;
  }

  void reserve(size_t n) { queue_.reserve(n); }
  size_t pending() const { return queue_.size(); }

 private:
  EventQueue<Payload> queue_;
  SimTime now_ = SimTime::zero();
  uint64_t processed_ = 0;
};

}  // namespace clustersim

#include <cassert>

template <typename Payload>
void clustersim::Simulation<Payload>::schedule_at(SimTime t, const Payload& p) {
  assert(t >= now_ && "event scheduled in the past");
  queue_.push(t < now_ ? now_ : t, p);
}
