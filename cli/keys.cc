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
  const ModelVsTables m = builtin_vs_measured(p, *gpu);
  if (m.gemm.points == 0 && m.attention_forward.points == 0 && m.attention_backward.points == 0)
    throw InputError(SourceMark{args[0], 0, 0}, "the profile has no GEMM or attention table to check");
  if (e.points > 0)
    std::printf(
        "gemm interpolation, %d held-out shapes (powers-of-two grid predicting the shapes between): median |err| "
        "%.2f%%, p95 %.2f%%, worst %.2f%%\n",
        e.points, 100 * e.median, 100 * e.p95, 100 * e.worst);
  std::printf(
      "built-in model (no tables, this profile's other keys) on %s against the measured rows, model / measured:\n",
      gpu->name.c_str());
  auto line = [](const char* what, const ModelVsTable& t) {
    if (t.points == 0) return;
    std::printf("  %-19s %5d rows: median %.3f, p10 %.3f, p90 %.3f; median |err| %.2f%%\n", what, t.points, t.median,
                t.p10, t.p90, 100 * t.median_abs);
  };
  line("gemm", m.gemm);
  if (!m.gemm_by_last_wave.empty()) {
    std::printf("  gemm rows of 1,024 and more a side, by how full their last wave of 128 x 256 tiles is on %d SMs\n"
                "  (and with compute.gemm_stream_k %s, median and median |err|):\n",
                gpu->sm_count, p.compute.gemm_stream_k ? "false" : "true");
    for (const auto& b : m.gemm_by_last_wave) {
      const ModelVsTable& t = b.as_set;
      std::printf("    %-17s %5d rows: median %.3f, p10 %.3f, p90 %.3f; median |err| %.2f%% (%.3f, %.2f%%)\n",
                  b.label.c_str(), t.points, t.median, t.p10, t.p90, 100 * t.median_abs, b.flipped.median,
                  100 * b.flipped.median_abs);
    }
  }
  line("attention forward", m.attention_forward);
  line("attention backward", m.attention_backward);
  if (!board_is_preset_model(p.gpu, gpu->name))
    std::cerr << args[0] << ": warning: the profile was measured on " << p.gpu << ", checked here as " << gpu->name
              << "\n";
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
