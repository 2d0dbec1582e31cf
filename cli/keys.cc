// `clustersim keys` and `clustersim profile-check`: the scenario keys, a profile's held-out error.
#include "calibrate/profile.h"
#include "calibrate/profile_check.h"
#include "scenarios/scenario.h"
#include "topology/presets.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"

namespace clustersim {

// Held-out error of a profile's GEMM interpolation; runs anywhere (no GPU needed).
int cmd_profile_check(const std::vector<std::string>& args) {
  if (args.size() != 1 && args.size() != 3) throw UsageError("profile-check takes P.yaml [--gpu PRESET]");
  const CalibrationProfile p = load_profile(args[0], SourceMark{args[0], 0, 0});
  std::string gpu_name = "h200-sxm";
  if (args.size() == 3) {
    if (args[1] != "--gpu") throw UsageError("unknown option '" + args[1] + "' for profile-check");
    gpu_name = args[2];
  }
  const GpuSpec* gpu = find_gpu_preset(gpu_name);
  if (!gpu) throw InputError(SourceMark{"--gpu", 0, 0}, "unknown GPU preset '" + gpu_name + "'");
  const HeldOutError e = gemm_held_out_error(p, *gpu);
  if (e.points == 0) throw InputError(SourceMark{args[0], 0, 0}, "the profile has no GEMM table to check");
  std::printf(
      "gemm interpolation, %d held-out shapes (powers-of-two grid predicting the shapes between): median |err| %.2f%%, "
      "p95 %.2f%%, "
      "worst %.2f%%\n",
      e.points, 100 * e.median, 100 * e.p95, 100 * e.worst);
  return 0;
}

int cmd_keys() {
  auto cell = [](std::string v) {  // a literal '|' would end a Markdown table cell
    for (size_t i = v.find('|'); i != std::string::npos; i = v.find('|', i + 2)) v.replace(i, 1, "\\|");
    return v;
  };
  std::cout << "| key | type | default | meaning |\n| --- | --- | --- | --- |\n";
  for (const auto& k : scenario_key_docs())
    std::cout << "| `" << k.key << "` | " << cell(k.type) << " | " << cell(k.default_value) << " | " << cell(k.doc)
              << " |\n";
  return 0;
}

}  // namespace clustersim
