#include "cost_models/protocol.h"

#include <algorithm>

namespace clustersim {

std::string_view to_string(Protocol p) {
  switch (p) {
    case Protocol::LL:
      return "LL";
    case Protocol::LL128:
      return "LL128";
    case Protocol::Simple:
      return "Simple";
  }
  return "?";
}

bool parse_protocol(std::string_view s, Protocol& out) {
  for (Protocol p : {Protocol::LL, Protocol::LL128, Protocol::Simple})
    if (s == to_string(p)) {
      out = p;
      return true;
    }
  return false;
}

double CollectiveFitRow::seconds(double bytes) const {
  if (points.empty()) return alpha_s + beta_s_per_byte * bytes;
  if (bytes <= points.front().first || points.size() == 1) return points.front().second;
  size_t hi = 1;
  while (hi + 1 < points.size() && points[hi].first < bytes) ++hi;
  const auto [b0, t0] = points[hi - 1];
  const auto [b1, t1] = points[hi];
  const double slope = (t1 - t0) / (b1 - b0);
  // Beyond the last size a falling segment (noise) would predict less time for more
  // bytes; the line over every size carries on instead.
  if (bytes > b1 && slope <= 0) return t1 + beta_s_per_byte * (bytes - b1);
  return std::max(t0 + slope * (bytes - b0), 0.0);
}

}  // namespace clustersim
