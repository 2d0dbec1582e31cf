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

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace clustersim {

class MaxMinSystem {
 public:
  using Id = uint32_t;

  Id add_constraint(double capacity);
  Id add_variable(std::span<const Id> constraints, double weight = 1.0,
                  double bound = std::numeric_limits<double>::infinity());
  void remove_variable(Id v);

  // Recomputes the rates of every component touched since the last call; returns the
  // constraints whose usage may have changed (those of the recomputed components).
  const std::vector<Id>& solve();

  double rate(Id v) const { return rates_[v]; }
  // The sum of the rates of the variables crossing c, as of the last solve().
  double usage(Id c) const { return cons_[c].used; }
  double capacity(Id c) const { return cons_[c].capacity; }
  size_t live_variables() const { return live_; }
  size_t constraints() const { return cons_.size(); }

 private:
  struct Var {
    std::vector<Id> cons;
    std::vector<Id> pos;  // pos[j]: this variable's index in cons_[cons[j]].vars
    double weight = 1, bound = 0;
    bool alive = false;
  };
  struct Con {
    double capacity = 0;
    double used = 0;       // sum of its variables' rates, kept by solve()
    std::vector<Id> vars;  // live variables crossing it
    bool dirty = false;
  };
  void fill(const std::vector<Id>& comp_cons, const std::vector<Id>& comp_vars);

  // Scratch of solve() and fill(), kept to spare an allocation per re-solve.
  std::vector<Id> comp_cons_, comp_vars_, stack_;
  std::vector<double> remaining_, weights_;
  std::vector<char> fixed_;
  std::vector<Var> vars_;
  std::vector<double> rates_;  // by variable, apart from Var: read for every live flow per event
  // Marks of the component walk, apart from Con and Var: dense, so the walk's check of a
  // link it may already have seen touches 4 bytes, not the link's whole record.
  std::vector<uint32_t> con_mark_, var_mark_;
  std::vector<Con> cons_;
  std::vector<Id> free_vars_;
  std::vector<Id> dirty_;
  std::vector<Id> changed_;
  uint32_t epoch_ = 0;
  size_t live_ = 0;
};

}  // namespace clustersim
