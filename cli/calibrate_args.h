// calibrate's arguments, read and checked without a GPU: the GPU binary's command reads
// them here, and clustersim checks them itself when that binary cannot be run.
#pragma once

#include <string>
#include <vector>

#include "calibrate/profile.h"

namespace clustersim {

struct CalibrateArgs {
  std::string out, raw;
  std::string suite = "all";      // as given, for the profile's `command`
  std::string attention_backend;  // as given: auto, own or cudnn ("" when not given)
  int passes = 3;                 // real::MicrobenchOptions' default
  bool gemm = false, attention = false, memory = false, launch = false;
  bool collectives = false, p2p = false, overlap = false;
  bool all = false;  // every suite; collectives and p2p where the machine has two GPUs
  // --attention-from: the attention table another stack's kernels produced, and the
  // backend it names.
  std::vector<AttentionPoint> borrowed;
  std::string borrowed_backend;
};

// Throws std::invalid_argument (a usage error) or InputError (a bad value, marked at its
// option or in the file it names).
CalibrateArgs parse_calibrate_args(const std::vector<std::string>& args);

}  // namespace clustersim
