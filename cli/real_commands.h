// Commands that need GPUs: `calibrate` (microbenchmarks -> profile) and validate's runs
// on the GPU (real against simulated). Built only with the real backend.
#pragma once

#include <string>
#include <vector>

#include "cli/validate.h"

namespace clustersim {

int cmd_calibrate(const std::vector<std::string>& args);
// validate's access to the GPUs (cli/validate.h).
RealHooks real_hooks();

}  // namespace clustersim
