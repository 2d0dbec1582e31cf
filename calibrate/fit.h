// Fitting collective measurements: for each (operation, algorithm, protocol, group size)
// a least-squares line t = α + β·bytes over the measured sizes, weighted so every size
// counts by its relative error (weights 1/t²), with the residuals kept.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace clustersim {

struct CollectiveSample {
  std::string op, algo, proto;  // "all-reduce", "ring" / "tree" / "nvls" / "p2p", "LL" / "LL128" / "Simple"
  int ranks = 2;
  double bytes = 0, seconds = 0;
};

struct CollectiveFit {
  std::string op, algo, proto;
  int ranks = 2;
  double alpha_s = 0;           // latency
  double beta_s_per_byte = 0;   // inverse bandwidth
  double rms_rel_residual = 0;  // sqrt(mean(((α + β·b) - t) / t)²)
  int points = 0;
};

std::vector<CollectiveFit> fit_collectives(const std::vector<CollectiveSample>& samples);

// Held-out error of the profile's interpolation (CollectiveFitRow::seconds): each
// interior size of each series predicted from its series with that size left out,
// (predicted - measured) / measured. Sizes at either end are not interior and are skipped.
struct HeldOutError {
  CollectiveSample sample;
  double predicted_s = 0, error = 0;
};
std::vector<HeldOutError> leave_one_size_out(const std::vector<CollectiveSample>& samples);

}  // namespace clustersim
