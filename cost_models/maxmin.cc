#include "cost_models/maxmin.h"

#include <algorithm>
#include <stdexcept>

namespace clustersim {

MaxMinSystem::Id MaxMinSystem::add_constraint(double capacity) {
  if (!(capacity > 0)) throw std::invalid_argument("max-min: a constraint needs a positive capacity");
  cons_.push_back(Con{capacity, {}, false, 0});
  return static_cast<Id>(cons_.size() - 1);
}

MaxMinSystem::Id MaxMinSystem::add_variable(std::span<const Id> constraints, double weight, double bound) {
  if (!(weight > 0)) throw std::invalid_argument("max-min: a variable needs a positive weight");
  Id v;
  if (!free_vars_.empty()) {
    v = free_vars_.back();
    free_vars_.pop_back();
  } else {
    v = static_cast<Id>(vars_.size());
    vars_.emplace_back();
  }
  Var& var = vars_[v];
  var.cons.assign(constraints.begin(), constraints.end());
  var.weight = weight;
  var.bound = bound;
  var.rate = 0;
  var.alive = true;
  for (Id c : var.cons) {
    cons_[c].vars.push_back(v);
    if (!cons_[c].dirty) {
      cons_[c].dirty = true;
      dirty_.push_back(c);
    }
  }
  if (var.cons.empty()) var.rate = bound;  // crosses nothing: only its own bound limits it
  ++live_;
  return v;
}

void MaxMinSystem::remove_variable(Id v) {
  Var& var = vars_[v];
  if (!var.alive) return;
  for (Id c : var.cons) {
    auto& list = cons_[c].vars;
    auto it = std::find(list.begin(), list.end(), v);
    *it = list.back();
    list.pop_back();
    if (!cons_[c].dirty) {
      cons_[c].dirty = true;
      dirty_.push_back(c);
    }
  }
  var.alive = false;
  var.cons.clear();
  var.rate = 0;
  free_vars_.push_back(v);
  --live_;
}

double MaxMinSystem::usage(Id c) const {
  double u = 0;
  for (Id v : cons_[c].vars) u += vars_[v].rate;
  return u;
}

const std::vector<MaxMinSystem::Id>& MaxMinSystem::solve() {
  changed_.clear();
  ++epoch_;
  std::vector<Id>&comp_cons = comp_cons_, &comp_vars = comp_vars_, &stack = stack_;
  for (Id start : dirty_) {
    cons_[start].dirty = false;
    if (cons_[start].mark == epoch_) continue;
    if (cons_[start].vars.empty()) {  // its last flow left: a component of itself, nothing to share
      cons_[start].mark = epoch_;
      changed_.push_back(start);
      continue;
    }
    // Collect the component by alternating constraint -> variables -> constraints.
    comp_cons.clear();
    comp_vars.clear();
    stack.assign(1, start);
    cons_[start].mark = epoch_;
    while (!stack.empty()) {
      const Id c = stack.back();
      stack.pop_back();
      comp_cons.push_back(c);
      for (Id v : cons_[c].vars) {
        if (vars_[v].mark == epoch_) continue;
        vars_[v].mark = epoch_;
        comp_vars.push_back(v);
        for (Id c2 : vars_[v].cons)
          if (cons_[c2].mark != epoch_) {
            cons_[c2].mark = epoch_;
            stack.push_back(c2);
          }
      }
    }
    fill(comp_cons, comp_vars);
    changed_.insert(changed_.end(), comp_cons.begin(), comp_cons.end());
  }
  dirty_.clear();
  return changed_;
}

void MaxMinSystem::fill(const std::vector<Id>& comp_cons, const std::vector<Id>& comp_vars) {
  // Progressive filling. remaining[c] and weights[c] are kept per constraint of the
  // component; a variable is fixed once, at the smallest share among its constraints.
  std::vector<double>&remaining = remaining_, &weights = weights_;
  remaining.resize(comp_cons.size());
  weights.assign(comp_cons.size(), 0.0);
  for (size_t i = 0; i < comp_cons.size(); ++i) remaining[i] = cons_[comp_cons[i]].capacity;
  // Constraint index lookup: reuse `mark` as the slot (marks are unique per epoch).
  for (size_t i = 0; i < comp_cons.size(); ++i) cons_[comp_cons[i]].mark = static_cast<uint32_t>(i);
  std::vector<char>& fixed = fixed_;
  fixed.assign(comp_vars.size(), 0);
  for (size_t j = 0; j < comp_vars.size(); ++j) {
    Var& v = vars_[comp_vars[j]];
    v.rate = 0;
    for (Id c : v.cons) weights[cons_[c].mark] += v.weight;
  }
  size_t left = comp_vars.size();
  while (left > 0) {
    double share = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < comp_cons.size(); ++i)
      if (weights[i] > 0) share = std::min(share, std::max(0.0, remaining[i]) / weights[i]);
    // A variable's own bound can bind before any link does.
    for (size_t j = 0; j < comp_vars.size(); ++j)
      if (!fixed[j]) share = std::min(share, vars_[comp_vars[j]].bound / vars_[comp_vars[j]].weight);
    const double tol = share * 1e-12;
    size_t fixed_now = 0;
    for (size_t j = 0; j < comp_vars.size(); ++j) {
      if (fixed[j]) continue;
      Var& v = vars_[comp_vars[j]];
      bool bind = v.bound / v.weight <= share + tol;
      for (Id c : v.cons) {
        const uint32_t i = cons_[c].mark;
        if (std::max(0.0, remaining[i]) / weights[i] <= share + tol) bind = true;
      }
      if (!bind) continue;
      v.rate = std::min(share * v.weight, v.bound);
      fixed[j] = 1;
      ++fixed_now;
      --left;
    }
    if (fixed_now == 0) break;  // cannot happen with positive weights; guards against NaN
    for (size_t j = 0; j < comp_vars.size(); ++j) {
      if (fixed[j] != 1) continue;
      fixed[j] = 2;  // accounted
      const Var& v = vars_[comp_vars[j]];
      for (Id c : v.cons) {
        const uint32_t i = cons_[c].mark;
        remaining[i] -= v.rate;
        weights[i] -= v.weight;
        if (weights[i] < 1e-12) weights[i] = 0;
      }
    }
  }
  for (Id c : comp_cons) cons_[c].mark = epoch_;
}

}  // namespace clustersim
