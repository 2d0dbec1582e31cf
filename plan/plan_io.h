// Plan serialization: a JSON document that both executors, debugging tools and other
// programs can read. Programs are written once (not per rank), so a file for 16,384
// ranks is as small as the Plan in memory. Reading validates everything an executor
// relies on (op kinds, streams, dependencies pointing backwards, groups and ranks in
// range) and reports problems as FILE:LINE:COL errors.
//
//   {"format": "clustersim-plan", "version": 1, "world_size": N,
//    "names": [...], "rank_program": [...], "rank_gpu": [...], "mirror_of": [...],
//    "groups": [{"kind": "tp", "ranks": [...]}, ...],
//    "programs": [{"name": ..., "streams": [...], "ops": [{...}, ...]}, ...]}
#pragma once

#include <string>

#include "plan/plan.h"

namespace clustersim {

std::string plan_to_json(const Plan& plan);
// `source` names the text in error messages (a file path).
Plan plan_from_json(const std::string& text, const std::string& source);

}  // namespace clustersim
