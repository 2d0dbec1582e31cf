// Commands that need GPUs: `calibrate` (microbenchmarks -> profile) and `validate`
// (real against simulated). Built only with the real backend.
#pragma once

#include <string>
#include <vector>

namespace clustersim {

int cmd_calibrate(const std::vector<std::string>& args);
int cmd_validate(const std::vector<std::string>& args);

}  // namespace clustersim
