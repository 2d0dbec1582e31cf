// libFuzzer target: whole scenarios with --set overrides, loaded, planned and run. The
// input is a scenario's text, optionally followed by a line "#--set" and one key=value
// per line. Bad input must be an InputError (FILE:LINE:COL: error: ...), an arithmetic
// past int64 a std::overflow_error naming it; anything else — another exception, a
// crash, a hang, a sanitizer report (signed overflow included) — is a bug. Runs are kept
// small (the work a fuzzer can afford per input); the budgets themselves are the CLI's.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "plan/training_planner.h"
#include "scenarios/error.h"
#include "scenarios/scenario.h"
#include "sim/run.h"
#include "sim/serving.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const struct Input {
    std::string path = "/tmp/clustersim-fuzz-run-" + std::to_string(::getpid()) + ".yaml";
    ~Input() { std::remove(path.c_str()); }
  } input;
  std::string text(reinterpret_cast<const char*>(data), size);
  // CLUSTERSIM_FUZZ_LAST=FILE keeps the input at hand in FILE: an input that runs out of
  // memory or time can then be read back.
  if (const char* last = std::getenv("CLUSTERSIM_FUZZ_LAST")) std::ofstream(last, std::ios::binary) << text;
  std::vector<std::string> sets;
  if (const size_t at = text.find("\n#--set\n"); at != std::string::npos) {
    std::string rest = text.substr(at + 8);
    text.resize(at + 1);
    for (size_t p = 0; p < rest.size() && sets.size() < 8;) {
      size_t e = rest.find('\n', p);
      if (e == std::string::npos) e = rest.size();
      if (e > p) sets.push_back(rest.substr(p, e - p));
      p = e + 1;
    }
  }
  {
    std::ofstream f(input.path, std::ios::binary | std::ios::trunc);
    f << text;
  }
  try {
    clustersim::Scenario s = clustersim::load_scenario(input.path, sets);
    s.output_sqlite.clear();
    s.output_trace.clear();
    s.calibration.clear();
    // What one input may cost: a few thousand ops or iterations, well under a second.
    if (s.gpus() > 64 || s.model.layers > 32 || s.model.seq_len > 32768) return 0;
    if (s.inference) {
      const auto longest = [](const clustersim::LengthDist& d) { return d.dist == "fixed" ? d.value : d.max; };
      if (s.serving.requests > 64 || !s.serving.trace.empty() || longest(s.serving.output) > 2048 ||
          longest(s.serving.prompt) > 16384)
        return 0;
      (void)clustersim::run_serving(s, false, false);
    } else {
      if (!s.model.blocks.empty()) {  // a model of blocks: its layers, and the micro-batches once planned
        int64_t layers = 0;
        for (const clustersim::BlockSpec& b : s.model.blocks) layers += b.count;
        if (layers > 64) return 0;
      } else {
        const clustersim::TrainingLayout l = clustersim::check_training_layout(s);
        if (l.micro_batches * l.virtual_stages > 64) return 0;
      }
      const clustersim::TrainingPlan plan = clustersim::build_training_plan(s);
      if (plan.layout.micro_batches > 64) return 0;
      if (plan.plan.total_ops() > 20000) return 0;
      clustersim::RunOptions o;
      o.keep_spans = false;
      o.record_link_usage = false;
      (void)clustersim::run_training(s, o);
    }
  } catch (const clustersim::InputError& e) {
    const std::string what = e.what();
    if (what.find(": error: ") == std::string::npos) {
      std::fprintf(stderr, "InputError without FILE:LINE:COL: error: %s\n", what.c_str());
      __builtin_trap();
    }
  } catch (const std::overflow_error&) {
    // checked arithmetic past int64, reported by name
  }
  return 0;
}
