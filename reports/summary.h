// The run summary: the human table and the `--json` object. Numbers print in the
// shortest form that round-trips, so equal runs give equal bytes.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace clustersim {

using Metrics = std::vector<std::pair<std::string, double>>;

// The named metric's value, or null when the run has none.
inline const double* find_metric(const Metrics& m, std::string_view name) {
  for (const auto& [k, v] : m)
    if (k == name) return &v;
  return nullptr;
}

std::string format_number(double v);  // shortest round-trip; integers without a fraction
std::string json_escape(const std::string& s);
// {"name": ..., <strings...>, <metrics...>} on one line.
std::string summary_json(const std::vector<std::pair<std::string, std::string>>& strings, const Metrics& metrics);

}  // namespace clustersim
