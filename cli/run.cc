// `clustersim run`: one training iteration or a serving run, as a table or one JSON object.
#include "sim/run.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "reports/summary.h"
#include "sim/jobs.h"
#include "sim/serving.h"

namespace clustersim {

int cmd_run(const std::vector<std::string>& args) {
  refuse_repeated(args, {"--samples", "--jobs"});
  std::string path;
  std::vector<std::string> sets;
  bool json = false;
  LoadOptions lo;  // --allow-large: past the work budgets
  RunOptions opt;
  bool jobs_given = false;
  int64_t samples = 0;  // 0: one run, no percentiles
  int jobs = 1;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--set")
      sets.push_back(need_value(args, i));
    else if (a.rfind("--set=", 0) == 0)
      sets.push_back(a.substr(6));
    else if (a == "--json")
      json = true;
    else if (a == "--allow-large")
      lo.allow_large = true;
    else if (a == "--simulate-all-ranks")
      opt.simulate_all_ranks = true;
    else if (a == "--samples")
      samples = need_count(args, i, "--samples", 100000);
    else if (a == "--jobs")
      jobs = static_cast<int>(need_count(args, i, "--jobs", 1024)), jobs_given = true;
    else if (!a.empty() && a[0] == '-')
      throw UsageError("unknown option '" + a + "' for run");
    else if (path.empty())
      path = a;
    else
      throw UsageError("run takes one scenario file, got '" + path + "' and '" + a + "'");
  }
  if (path.empty()) throw UsageError("run needs a scenario file");
  if (jobs_given && samples == 0) throw UsageError("--jobs spreads --samples over threads, expected --samples N too");
  Scenario s = load_scenario(path, sets, lo);
  if (!s.jobs.empty()) {
    if (samples > 0) throw UsageError("--samples draws one scenario's variability; a jobs: file runs each job once");
    const JobsOutcome o = run_jobs(s);
    std::cout << (json ? jobs_summary_json(s, o) + "\n" : jobs_summary_table(s, o));
    return 0;
  }
  if (!s.sweep.empty())
    std::cerr << s.mark("sweep").str()
              << ": warning: run simulates the scenario as written; sweep points are not run\n";
  // Draws differ only by what variability: draws at random.
  const VariabilityConfig& v = s.variability;
  if (samples > 1 && v.gpu_speed.dist == "none" && v.link_speed.dist == "none" && v.kernel_jitter <= 0)
    std::cerr << (s.marks.count("variability") ? s.mark("variability").str() : s.path) << ": warning: --samples "
              << samples
              << " draws the scenario's variability:, which draws nothing at random (gpu_speed, link_speed, "
                 "kernel_jitter): every draw is the same run\n";
  // A faster chip on the same board: under the power cap each FLOP keeps the energy the
  // capped rate gives it, so a peak raised alone mostly buys a lower clock (docs/model.md,
  // "Clocks under the power cap").
  if (s.power_cap && s.cluster.node.gpu.power_limit_w > 0 && s.marks.count("cluster.gpu_spec.bf16_tflops") &&
      !s.marks.count("cluster.gpu_spec.capped_bf16_tflops"))
    std::cerr << s.mark("cluster.gpu_spec.bf16_tflops").str()
              << ": warning: bf16_tflops is changed but capped_bf16_tflops, the rate at the power limit that sets "
                 "each FLOP's energy, stays "
              << format_number(s.cluster.node.gpu.capped_bf16_flops / 1e12)
              << ": set it too for a chip that does more work a joule, or cluster.power_cap: false\n";
  if (s.inference) {
    check_output_paths(s);
    ServingResult r = run_serving(s, !s.output_sqlite.empty() || !s.output_trace.empty(), true);
    if (samples > 0) run_serving_samples(s, r, samples, jobs);
    write_serving_outputs(s, r);
    std::cout << (json ? serving_summary_json(s, r) + "\n" : serving_summary_table(s, r));
    return 0;
  }
  check_output_paths(s);
  opt.progress = true;
  opt.record_link_usage = !s.output_sqlite.empty() || !s.output_trace.empty();
  opt.keep_spans = opt.record_link_usage;
  RunOutcome out = run_training(s, opt);
  if (samples > 0) run_samples(out, samples, jobs, opt);
  write_outputs(out);
  std::cout << (json ? summary_json_line(out) + "\n" : summary_table(out));
  return 0;
}

}  // namespace clustersim
