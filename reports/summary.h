// The run summary: the human table and the `--json` object. Numbers print in the
// shortest form that round-trips, so equal runs give equal bytes.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace clustersim {

using Metrics = std::vector<std::pair<std::string, double>>;

std::string format_number(double v);  // shortest round-trip; integers without a fraction
std::string json_escape(const std::string& s);
// {"name": ..., <strings...>, <metrics...>} on one line.
std::string summary_json(const std::vector<std::pair<std::string, std::string>>& strings, const Metrics& metrics);

}  // namespace clustersim
