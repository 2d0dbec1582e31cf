// Queries over a planned program that tests share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/training_planner.h"

namespace clustersim::testing {

// Whether op i of `prog` waits, directly or through other ops, for an op named `name`.
inline bool waits_for(const TrainingPlan& tp, const Program& prog, uint32_t i, const std::string& name) {
  std::vector<uint32_t> todo = {i};
  std::vector<bool> seen(prog.ops.size());
  while (!todo.empty()) {
    const Op& op = prog.ops[todo.back()];
    todo.pop_back();
    for (uint32_t d = op.dep_begin; d < op.dep_begin + op.dep_count; ++d) {
      const uint32_t j = prog.deps[d];
      if (seen[j]) continue;
      seen[j] = true;
      if (tp.plan.names[prog.ops[j].name] == name) return true;
      todo.push_back(j);
    }
  }
  return false;
}

}  // namespace clustersim::testing
