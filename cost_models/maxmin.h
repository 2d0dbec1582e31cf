// Max-min fair bandwidth sharing, a small solver in the manner of SimGrid's lmm.
//
// Variables are flows, constraints are links. Each variable v crosses a set of
// constraints and has a weight w_v (and an optional upper bound). The solution is the
// max-min fair allocation: no rate can grow without shrinking a rate that is already
// smaller or equal. Progressive filling computes it: repeatedly find the constraint
// whose remaining capacity, split over the weights of its unfixed variables, is the
// smallest share s; fix each of those variables at s·w_v; subtract; continue.
//
//   one link of capacity C, n equal flows          -> C/n each
//   flows A (links 1,2) and B (link 2), C1 < C2/2  -> A = C1, B = C2 − C1
//   a flow of weight 2 beside one of weight 1     -> it gets twice the share
//
// Incremental: adding or removing a variable marks its constraints dirty, and solve()
// recomputes only the connected components (variables linked through shared
// constraints) that contain a dirty constraint. Rates elsewhere are unchanged, which is
// exact because max-min allocations of disjoint components are independent.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "topology/huge_pages.h"

namespace clustersim {

class MaxMinSystem {
 public:
  using Id = uint32_t;

  Id add_constraint(double capacity);
  void reserve_constraints(size_t n) { cons_.reserve(n); }
  Id add_variable(std::span<const Id> constraints, double weight = 1.0,
                  double bound = std::numeric_limits<double>::infinity());
  void remove_variable(Id v);
  // Asks the memory system for these constraints' records ahead of an add_variable over
  // them (a caller adding many variables hides the misses of the later ones this way).
  void prefetch(std::span<const Id> constraints) const {
    for (Id c : constraints) __builtin_prefetch(&cons_[c], 1);
  }
  // The same ahead of a remove_variable: the variable's record, then (once that is in)
  // its constraints' records.
  void prefetch_variable(Id v) const { __builtin_prefetch(&vars_[v], 1); }
  void prefetch_links_of(Id v) const {
    const Var& var = vars_[v];
    for (uint32_t j = 0; j < var.count(); ++j) __builtin_prefetch(&cons_[var.con(j)], 1);
  }

  // Recomputes the rates of every component touched since the last call; returns the
  // constraints whose usage may have changed (those of the recomputed components).
  const std::vector<Id>& solve();

  // The variables of the components the last solve() recomputed (their rates may have changed).
  const std::vector<Id>& changed_variables() const { return changed_vars_; }
  double rate(Id v) const { return rates_[v]; }
  // The sum of the rates of the variables crossing c, as of the last solve().
  double usage(Id c) const {
    double used = 0;
    for (Id v : cons_[c].vars) used += rates_[v];
    return used;
  }
  double capacity(Id c) const { return cons_[c].capacity; }
  bool idle(Id c) const { return cons_[c].vars.empty(); }
  // Calls f(c) for each constraint variable v crosses (once per crossing).
  template <class F>
  void for_each_link(Id v, F f) const {
    const Var& var = vars_[v];
    for (uint32_t j = 0; j < var.count(); ++j) f(var.con(j));
  }
  size_t live_variables() const { return live_; }
  size_t constraints() const { return cons_.size(); }

 private:
  // A list of ids, inline up to N (no allocation, and in the same cache line as the
  // record holding it), on the heap beyond.
  template <uint32_t N>
  class SmallIds {
   public:
    SmallIds() = default;
    SmallIds(const SmallIds&) = delete;
    SmallIds& operator=(const SmallIds&) = delete;
    SmallIds(SmallIds&& o) noexcept { take(o); }
    SmallIds& operator=(SmallIds&& o) noexcept {
      if (this != &o) {
        release();
        take(o);
      }
      return *this;
    }
    ~SmallIds() { release(); }
    Id* data() { return cap_ > N ? heap_ : inline_; }
    const Id* data() const { return cap_ > N ? heap_ : inline_; }
    uint32_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    Id& operator[](uint32_t i) { return data()[i]; }
    Id operator[](uint32_t i) const { return data()[i]; }
    const Id* begin() const { return data(); }
    const Id* end() const { return data() + size_; }
    void push_back(Id x) {
      if (size_ == cap_) grow();
      data()[size_++] = x;
    }
    void pop_back() { --size_; }
    void clear() { size_ = 0; }

   private:
    void grow() {
      const uint32_t cap = 2 * cap_;
      Id* bigger = new Id[cap];
      std::copy(data(), data() + size_, bigger);
      release();
      heap_ = bigger;
      cap_ = cap;
    }
    void release() {
      if (cap_ > N) delete[] heap_;
      cap_ = N;
    }
    void take(SmallIds& o) {
      size_ = o.size_;
      cap_ = o.cap_;
      if (o.cap_ > N)
        heap_ = o.heap_;
      else
        std::copy(o.inline_, o.inline_ + o.size_, inline_);
      o.cap_ = N;
      o.size_ = 0;
    }
    uint32_t size_ = 0, cap_ = N;
    union {
      Id inline_[N];
      Id* heap_;
    };
  };
  struct Var {
    // Pairs (constraint, this variable's index in that constraint's vars), so removal
    // finds its place in each list without a search.
    SmallIds<16> links;
    double weight = 1, bound = 0;
    bool alive = false;
    bool bounded() const { return bound != std::numeric_limits<double>::infinity(); }
    uint32_t count() const { return links.size() / 2; }
    Id con(uint32_t j) const { return links[2 * j]; }
  };
  // Half a cache line: the solver's walk over a link reads its mark, flows and capacity
  // together, and a large fabric's links fit the caches twice as well as in a whole line.
  // A link's usage is summed from its flows' rates when asked (only link-usage records ask).
  struct alignas(32) Con {
    double capacity = 0;
    SmallIds<2> vars;   // live variables crossing it
    uint32_t mark = 0;  // solve()'s epoch when its walk reached it; fill()'s slot during fill()
    bool dirty = false;
  };
  static_assert(sizeof(Con) == 32);
  // A fill's start: each constraint's remaining capacity and the summed weights of its
  // variables, by slot (a constraint's mark holds its slot until the fill ends; with
  // `var_slots`, a variable's walk mark holds its slot too); every rate at 0, none fixed.
  void start_fill(const std::vector<Id>& comp_cons, const std::vector<Id>& comp_vars, bool var_slots);
  void fill(const std::vector<Id>& comp_cons, const std::vector<Id>& comp_vars);
  // The same filling with the constraints' shares in a heap: each round costs the flows it
  // fixes and the links they cross, not the whole component (no variable bounded).
  void fill_by_heap(const std::vector<Id>& comp_cons, const std::vector<Id>& comp_vars);
  void mark_dirty(Id c) {
    if (!cons_[c].dirty) {
      cons_[c].dirty = true;
      dirty_.push_back(c);
    }
  }

  // Scratch of solve() and fill(), kept to spare an allocation per re-solve.
  std::vector<Id> comp_cons_, comp_vars_, stack_;
  std::vector<double> remaining_, weights_;
  std::vector<char> fixed_;
  struct Share {
    double share;
    uint32_t slot, version;
    bool operator>(const Share& o) const { return share != o.share ? share > o.share : slot > o.slot; }
  };
  std::vector<Share> heap_;
  std::vector<uint32_t> slot_version_, touched_round_, round_, touched_;
  std::vector<Var> vars_;
  std::vector<double> rates_;  // by variable, apart from Var: dense, read by the flow network for each re-rated flow
  std::vector<uint32_t> var_mark_;
  BigVector<Con> cons_;
  std::vector<Id> free_vars_;
  std::vector<Id> dirty_;
  std::vector<Id> changed_, changed_vars_;
  uint32_t epoch_ = 0;
  size_t live_ = 0;
};

}  // namespace clustersim
