#include "calibrate/fit.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "cost_models/protocol.h"

namespace clustersim {

std::vector<CollectiveFit> fit_collectives(const std::vector<CollectiveSample>& samples) {
  std::map<std::tuple<std::string, std::string, std::string, int>, std::vector<const CollectiveSample*>> groups;
  for (const CollectiveSample& s : samples)
    if (s.seconds > 0) groups[{s.op, s.algo, s.proto, s.ranks}].push_back(&s);
  std::vector<CollectiveFit> out;
  for (const auto& [key, pts] : groups) {
    // Weighted normal equations for t ≈ α + β·b with w = 1/t².
    double sw = 0, sb = 0, sbb = 0, st = 0, sbt = 0;
    for (const CollectiveSample* p : pts) {
      const double w = 1.0 / (p->seconds * p->seconds);
      sw += w;
      sb += w * p->bytes;
      sbb += w * p->bytes * p->bytes;
      st += w * p->seconds;
      sbt += w * p->bytes * p->seconds;
    }
    CollectiveFit f;
    std::tie(f.op, f.algo, f.proto, f.ranks) = key;
    f.points = static_cast<int>(pts.size());
    const double det = sw * sbb - sb * sb;
    if (pts.size() >= 2 && det > 0) {
      f.beta_s_per_byte = (sw * sbt - sb * st) / det;
      f.alpha_s = (st - f.beta_s_per_byte * sb) / sw;
    } else {
      f.alpha_s = pts.front()->seconds;
    }
    // Physical: neither term negative (refit the other alone if one would be).
    if (f.beta_s_per_byte < 0) {
      f.beta_s_per_byte = 0;
      f.alpha_s = st / sw;
    }
    if (f.alpha_s < 0) {
      f.alpha_s = 0;
      f.beta_s_per_byte = sbt / sbb;
    }
    double r2 = 0;
    for (const CollectiveSample* p : pts) {
      const double r = (f.alpha_s + f.beta_s_per_byte * p->bytes - p->seconds) / p->seconds;
      r2 += r * r;
    }
    f.rms_rel_residual = std::sqrt(r2 / static_cast<double>(pts.size()));
    out.push_back(f);
  }
  return out;
}

std::vector<HeldOutError> leave_one_size_out(const std::vector<CollectiveSample>& samples) {
  std::map<std::tuple<std::string, std::string, std::string, int>, std::vector<CollectiveSample>> groups;
  for (const CollectiveSample& s : samples)
    if (s.seconds > 0) groups[{s.op, s.algo, s.proto, s.ranks}].push_back(s);
  std::vector<HeldOutError> out;
  for (auto& [key, pts] : groups) {
    std::sort(pts.begin(), pts.end(), [](const auto& a, const auto& b) { return a.bytes < b.bytes; });
    for (size_t i = 1; i + 1 < pts.size(); ++i) {
      CollectiveFitRow row;
      for (size_t j = 0; j < pts.size(); ++j)
        if (j != i) row.points.emplace_back(pts[j].bytes, pts[j].seconds);
      const double t = row.seconds(pts[i].bytes);
      out.push_back({pts[i], t, (t - pts[i].seconds) / pts[i].seconds});
    }
  }
  return out;
}

}  // namespace clustersim
