#include "cost_models/maxmin.h"

#include <algorithm>
#include <stdexcept>

namespace clustersim {

MaxMinSystem::Id MaxMinSystem::add_constraint(double capacity) {
  if (!(capacity > 0)) throw std::invalid_argument("max-min: a constraint needs a positive capacity");
  cons_.emplace_back();
  cons_.back().capacity = capacity;
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
  // A flow's links lie far apart in cons_ on a large fabric: ask for all of them before
  // touching any, so the cache misses overlap.
  for (Id c : constraints) __builtin_prefetch(&cons_[c], 1);
  Var& var = vars_[v];
  var.links.clear();
  var.weight = weight;
  var.bound = bound;
  rates_[v] = 0;
  var.alive = true;
  for (Id c : constraints) {
    Con& con = cons_[c];
    var.links.push_back(c);
    var.links.push_back(con.vars.size());
    con.vars.push_back(v);
    mark_dirty(c);
  }
  if (constraints.empty()) rates_[v] = bound;  // crosses nothing: only its own bound limits it
  ++live_;
  return v;
}

void MaxMinSystem::remove_variable(Id v) {
  Var& var = vars_[v];
  if (!var.alive) return;
  for (uint32_t j = 0; j < var.count(); ++j) {
    const Id c = var.links[2 * j], at = var.links[2 * j + 1];
    auto& list = cons_[c].vars;
    // The list's last entry takes this one's place, and its variable's record follows.
    const Id end = list.size() - 1, last = list[end];
    list[at] = last;
    list.pop_back();
    if (at != end) {
      Var& moved = vars_[last];
      for (uint32_t k = 0; k < moved.count(); ++k)
        if (moved.links[2 * k] == c && moved.links[2 * k + 1] == end) {
          moved.links[2 * k + 1] = at;
          break;
        }
    }
    mark_dirty(c);
  }
  var.alive = false;
  var.links.clear();
  rates_[v] = 0;
  free_vars_.push_back(v);
  --live_;
}

const std::vector<MaxMinSystem::Id>& MaxMinSystem::solve() {
  changed_.clear();
  changed_vars_.clear();
  ++epoch_;
  std::vector<Id>&comp_cons = comp_cons_, &comp_vars = comp_vars_, &stack = stack_;
  constexpr size_t kAhead = 48;  // records asked for ahead of the walk (a few flows' links)
  for (size_t k = 0; k < std::min(kAhead, dirty_.size()); ++k) __builtin_prefetch(&cons_[dirty_[k]], 1);
  for (size_t k = 0; k < dirty_.size(); ++k) {
    if (k + kAhead < dirty_.size()) __builtin_prefetch(&cons_[dirty_[k + kAhead]], 1);
    const Id start = dirty_[k];
    Con& first = cons_[start];
    first.dirty = false;
    if (first.mark == epoch_) continue;
    first.mark = epoch_;
    if (first.vars.empty()) {  // its last flow left: a component of itself, nothing to share
      changed_.push_back(start);
      continue;
    }
    // Collect the component by alternating constraint -> variables -> constraints.
    comp_cons.clear();
    comp_vars.clear();
    stack.assign(1, start);
    while (!stack.empty()) {
      const Id c = stack.back();
      stack.pop_back();
      comp_cons.push_back(c);
      for (Id v : cons_[c].vars) {
        if (var_mark_[v] == epoch_) continue;
        var_mark_[v] = epoch_;
        comp_vars.push_back(v);
        const Var& var = vars_[v];
        for (uint32_t j = 0; j < var.count(); ++j) {
          Con& next = cons_[var.con(j)];
          if (next.mark != epoch_) {
            next.mark = epoch_;
            stack.push_back(var.con(j));
          }
        }
      }
    }
    fill(comp_cons, comp_vars);
    changed_.insert(changed_.end(), comp_cons.begin(), comp_cons.end());
    changed_vars_.insert(changed_vars_.end(), comp_vars.begin(), comp_vars.end());
  }
  dirty_.clear();
  return changed_;
}

void MaxMinSystem::start_fill(const std::vector<Id>& comp_cons, const std::vector<Id>& comp_vars, bool var_slots) {
  remaining_.resize(comp_cons.size());
  weights_.assign(comp_cons.size(), 0.0);
  // Each constraint's mark holds its slot during the fill (the walk is over).
  for (size_t i = 0; i < comp_cons.size(); ++i) {
    Con& con = cons_[comp_cons[i]];
    remaining_[i] = con.capacity;
    con.mark = static_cast<uint32_t>(i);
  }
  fixed_.assign(comp_vars.size(), 0);
  for (size_t j = 0; j < comp_vars.size(); ++j) {
    const Var& v = vars_[comp_vars[j]];
    if (var_slots) var_mark_[comp_vars[j]] = static_cast<uint32_t>(j);
    rates_[comp_vars[j]] = 0;
    for (uint32_t k = 0; k < v.count(); ++k) weights_[cons_[v.con(k)].mark] += v.weight;
  }
}

void MaxMinSystem::fill(const std::vector<Id>& comp_cons, const std::vector<Id>& comp_vars) {
  if (comp_vars.size() == 1 && vars_[comp_vars[0]].count() == comp_cons.size()) {
    // A flow alone on its links (each once): the progressive filling's single round.
    const Id v = comp_vars[0];
    const Var& var = vars_[v];
    double share = var.bound / var.weight;
    for (Id c : comp_cons) share = std::min(share, cons_[c].capacity / var.weight);
    const double rate = std::min(share * var.weight, var.bound);
    rates_[v] = rate;
    return;
  }
  // Past a few dozen flows the rounds' scans over the whole component dominate: the heap.
  if (comp_vars.size() >= 32) {
    bool bounded = false;
    for (Id v : comp_vars) bounded |= vars_[v].bounded();
    if (!bounded) return fill_by_heap(comp_cons, comp_vars);
  }
  // Progressive filling. remaining[c] and weights[c] are kept per constraint of the
  // component; a variable is fixed once, at the smallest share among its constraints.
  start_fill(comp_cons, comp_vars, false);
  std::vector<double>&remaining = remaining_, &weights = weights_;
  std::vector<char>& fixed = fixed_;
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
      for (uint32_t k = 0; k < v.count(); ++k) {
        const uint32_t i = cons_[v.con(k)].mark;
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
      for (uint32_t k = 0; k < v.count(); ++k) {
        Con& con = cons_[v.con(k)];
        const uint32_t i = con.mark;
        remaining[i] -= rate;
        weights[i] -= v.weight;
        if (weights[i] < 1e-12) weights[i] = 0;
      }
    }
  }
  for (Id c : comp_cons) cons_[c].mark = epoch_;
}

void MaxMinSystem::fill_by_heap(const std::vector<Id>& comp_cons, const std::vector<Id>& comp_vars) {
  // As fill(), with the same arithmetic in the same order (so the same rates to the bit):
  // a round's share is the smallest among the constraints; every unfixed variable on a
  // constraint at that share (within 1e-12) is fixed at it; the fixed variables are then
  // taken off their constraints in the component's order. The shares wait in a min-heap,
  // an entry stale once its constraint's version moves on.
  start_fill(comp_cons, comp_vars, true);
  std::vector<double>&remaining = remaining_, &weights = weights_;
  std::vector<char>& fixed = fixed_;
  slot_version_.assign(comp_cons.size(), 0);
  touched_round_.assign(comp_cons.size(), 0);
  auto share_of = [&](uint32_t i) { return std::max(0.0, remaining[i]) / weights[i]; };
  heap_.clear();
  for (uint32_t i = 0; i < comp_cons.size(); ++i)
    if (weights[i] > 0) heap_.push_back(Share{share_of(i), i, 0});
  std::make_heap(heap_.begin(), heap_.end(), std::greater<>());
  auto pop = [&] {
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
    const Share top = heap_.back();
    heap_.pop_back();
    return top;
  };
  auto current = [&](const Share& e) { return e.version == slot_version_[e.slot] && weights[e.slot] > 0; };
  size_t left = comp_vars.size();
  for (uint32_t round = 1; left > 0; ++round) {
    while (!heap_.empty() && !current(heap_.front())) pop();
    if (heap_.empty()) break;  // cannot happen with positive weights
    const double share = heap_.front().share, tol = share * 1e-12;
    round_.clear();
    while (!heap_.empty() && heap_.front().share <= share + tol) {
      const Share e = pop();
      if (!current(e)) continue;
      for (Id v : cons_[comp_cons[e.slot]].vars) {
        const uint32_t j = var_mark_[v];
        if (!fixed[j]) fixed[j] = 1, round_.push_back(j);
      }
    }
    std::sort(round_.begin(), round_.end());
    for (uint32_t j : round_) {
      const Var& v = vars_[comp_vars[j]];
      rates_[comp_vars[j]] = std::min(share * v.weight, v.bound);
    }
    left -= round_.size();
    touched_.clear();
    for (uint32_t j : round_) {
      fixed[j] = 2;
      const Var& v = vars_[comp_vars[j]];
      const double rate = rates_[comp_vars[j]];
      for (uint32_t k = 0; k < v.count(); ++k) {
        Con& con = cons_[v.con(k)];
        const uint32_t i = con.mark;
        remaining[i] -= rate;
        weights[i] -= v.weight;
        if (weights[i] < 1e-12) weights[i] = 0;
        ++slot_version_[i];
        if (touched_round_[i] != round) touched_round_[i] = round, touched_.push_back(i);
      }
    }
    for (uint32_t i : touched_)
      if (weights[i] > 0) {
        heap_.push_back(Share{share_of(i), i, slot_version_[i]});
        std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
      }
  }
  for (Id c : comp_cons) cons_[c].mark = epoch_;
  for (Id v : comp_vars) var_mark_[v] = epoch_;
}

}  // namespace clustersim
