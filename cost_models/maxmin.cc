#include "cost_models/maxmin.h"

#include <algorithm>
#include <stdexcept>

namespace clustersim {

MaxMinSystem::Id MaxMinSystem::add_constraint(double capacity) {
  if (!(capacity > 0)) throw std::invalid_argument("max-min: a constraint needs a positive capacity");
  cons_.push_back(Con{capacity, 0, {}, false});
  con_mark_.push_back(0);
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
    rates_.push_back(0);
    var_mark_.push_back(0);
  }
  // A flow's links lie far apart in cons_ on a large fabric: ask for all of them (then
  // for where each list grows) before touching any, so the cache misses overlap.
  for (Id c : constraints) __builtin_prefetch(&cons_[c]);
  for (Id c : constraints) __builtin_prefetch(cons_[c].vars.data() + cons_[c].vars.size(), 1);
  Var& var = vars_[v];
  var.cons.assign(constraints.begin(), constraints.end());
  var.weight = weight;
  var.bound = bound;
  rates_[v] = 0;
  var.alive = true;
  var.pos.resize(var.cons.size());
  for (size_t j = 0; j < var.cons.size(); ++j) {
    const Id c = var.cons[j];
    var.pos[j] = static_cast<Id>(cons_[c].vars.size());
    cons_[c].vars.push_back(v);
    if (!cons_[c].dirty) {
      cons_[c].dirty = true;
      dirty_.push_back(c);
    }
  }
  if (var.cons.empty()) rates_[v] = bound;  // crosses nothing: only its own bound limits it
  ++live_;
  return v;
}

void MaxMinSystem::remove_variable(Id v) {
  Var& var = vars_[v];
  if (!var.alive) return;
  for (size_t j = 0; j < var.cons.size(); ++j) {
    const Id c = var.cons[j];
    auto& list = cons_[c].vars;
    // The list's last entry takes this one's place, and its variable's record follows.
    const Id end = static_cast<Id>(list.size() - 1), at = var.pos[j], last = list[end];
    list[at] = last;
    list.pop_back();
    if (at != end) {
      Var& moved = vars_[last];
      for (size_t k = 0; k < moved.cons.size(); ++k)
        if (moved.cons[k] == c && moved.pos[k] == end) {
          moved.pos[k] = at;
          break;
        }
    }
    if (!cons_[c].dirty) {
      cons_[c].dirty = true;
      dirty_.push_back(c);
    }
  }
  var.alive = false;
  var.cons.clear();
  rates_[v] = 0;
  free_vars_.push_back(v);
  --live_;
}

const std::vector<MaxMinSystem::Id>& MaxMinSystem::solve() {
  changed_.clear();
  ++epoch_;
  std::vector<Id>&comp_cons = comp_cons_, &comp_vars = comp_vars_, &stack = stack_;
  for (Id start : dirty_) {
    cons_[start].dirty = false;
    if (con_mark_[start] == epoch_) continue;
    if (cons_[start].vars.empty()) {  // its last flow left: a component of itself, nothing to share
      con_mark_[start] = epoch_;
      cons_[start].used = 0;
      changed_.push_back(start);
      continue;
    }
    // Collect the component by alternating constraint -> variables -> constraints.
    comp_cons.clear();
    comp_vars.clear();
    stack.assign(1, start);
    con_mark_[start] = epoch_;
    while (!stack.empty()) {
      const Id c = stack.back();
      stack.pop_back();
      comp_cons.push_back(c);
      for (Id v : cons_[c].vars) {
        if (var_mark_[v] == epoch_) continue;
        var_mark_[v] = epoch_;
        comp_vars.push_back(v);
        for (Id c2 : vars_[v].cons)
          if (con_mark_[c2] != epoch_) {
            con_mark_[c2] = epoch_;
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
  for (size_t i = 0; i < comp_cons.size(); ++i) {
    con_mark_[comp_cons[i]] = static_cast<uint32_t>(i);
    cons_[comp_cons[i]].used = 0;
  }
  std::vector<char>& fixed = fixed_;
  fixed.assign(comp_vars.size(), 0);
  for (size_t j = 0; j < comp_vars.size(); ++j) {
    const Var& v = vars_[comp_vars[j]];
    rates_[comp_vars[j]] = 0;
    for (Id c : v.cons) weights[con_mark_[c]] += v.weight;
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
      const Var& v = vars_[comp_vars[j]];
      bool bind = v.bound / v.weight <= share + tol;
      for (Id c : v.cons) {
        const uint32_t i = con_mark_[c];
        if (std::max(0.0, remaining[i]) / weights[i] <= share + tol) bind = true;
      }
      if (!bind) continue;
      rates_[comp_vars[j]] = std::min(share * v.weight, v.bound);
      fixed[j] = 1;
      ++fixed_now;
      --left;
    }
    if (fixed_now == 0) break;  // cannot happen with positive weights; guards against NaN
    for (size_t j = 0; j < comp_vars.size(); ++j) {
      if (fixed[j] != 1) continue;
      fixed[j] = 2;  // accounted
      const Var& v = vars_[comp_vars[j]];
      const double rate = rates_[comp_vars[j]];
      for (Id c : v.cons) {
        const uint32_t i = con_mark_[c];
        remaining[i] -= rate;
        cons_[c].used += rate;
        weights[i] -= v.weight;
        if (weights[i] < 1e-12) weights[i] = 0;
      }
    }
  }
  for (Id c : comp_cons) con_mark_[c] = epoch_;
}

}  // namespace clustersim
