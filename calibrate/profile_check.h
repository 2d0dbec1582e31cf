// How well a profile's interpolation predicts shapes it did not measure: a held-out
// test on the GEMM table. The points whose m is on every other grid line (×4 apart) are
// kept; those halfway between (the ×2 points) are predicted from them and compared with
// their measurement. Spacing ×4 is twice the table's, so this overstates the error at
// the table's own resolution.
#pragma once

#include <string>

#include "calibrate/profile.h"
#include "topology/gpu.h"

namespace clustersim {

struct HeldOutError {
  int points = 0;
  double median = 0, p95 = 0, worst = 0;  // |predicted - measured| / measured
};

HeldOutError gemm_held_out_error(const CalibrationProfile& profile, const GpuSpec& gpu);

}  // namespace clustersim
