// How well a profile's interpolation predicts shapes it did not measure: a held-out
// test on the GEMM table. The shapes whose m, n and k are powers of two are kept; those
// with m between two powers (n, k powers) are predicted from them alone and compared with
// their measurement. The kept grid is coarser than the whole table, so this overstates
// the error at the table's own resolution.
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
