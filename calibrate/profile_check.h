// How well a profile's interpolation predicts shapes it did not measure: a held-out
// test on the GEMM table. The shapes whose m, n and k are powers of two are kept; those
// with m between two powers (n, k powers) are predicted from them alone and compared with
// their measurement. The kept grid is coarser than the whole table, so this overstates
// the error at the table's own resolution.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "calibrate/profile.h"
#include "topology/gpu.h"

namespace clustersim {

struct HeldOutError {
  int points = 0;
  double median = 0, p95 = 0, worst = 0;  // |predicted - measured| / measured
};

HeldOutError gemm_held_out_error(const CalibrationProfile& profile, const GpuSpec& gpu);

// The built-in (uncalibrated) model against each row of a profile's measured table: the
// model's burst time over the measured time, for the GEMM table and for the attention
// table's forward and backward rows. The model takes the profile's scalar keys and none of
// its tables; a backward row is the whole library call (its two small kernels with it).
struct ModelVsTable {
  int points = 0;
  double median = 0, p10 = 0, p90 = 0;  // model / measured
  double median_abs = 0;                // |model / measured - 1|
};
struct ModelVsTables {
  ModelVsTable gemm, attention_forward, attention_backward;
  // The GEMM rows of 1,024 and more on every side, by how full the last wave of 128 × 256
  // output tiles is on the GPU's SMs (tiles / (waves · SMs), waves rounded up): the
  // built-in form with the profile's compute.gemm_stream_k, and with it the other way
  // (`flipped`). Labels as printed.
  struct ByLastWave {
    std::string label;
    ModelVsTable as_set, flipped;
  };
  std::vector<ByLastWave> gemm_by_last_wave;
};
ModelVsTables builtin_vs_measured(const CalibrationProfile& profile, const GpuSpec& gpu);

}  // namespace clustersim
