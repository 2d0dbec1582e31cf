// `clustersim plan`: the scenario's Plan as JSON.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "plan/plan_io.h"
#include "plan/training_planner.h"
#include "reports/output_file.h"
#include "scenarios/scenario.h"
#include "sim/run.h"

namespace clustersim {

int cmd_plan(const std::vector<std::string>& args) {
  refuse_repeated(args, {"--out"});
  std::string path, out;
  std::vector<std::string> sets;
  LoadOptions lo;  // --allow-large: past the work budgets
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--set")
      sets.push_back(need_value(args, i));
    else if (a == "--allow-large")
      lo.allow_large = true;
    else if (a == "--out") {
      out = need_value(args, i);
      if (out.empty()) throw InputError(SourceMark{"--out", 0, 0}, "expected a file name, got ''");
    } else if (!a.empty() && a[0] == '-')
      throw UsageError("unknown option '" + a + "' for plan");
    else if (path.empty())
      path = a;
    else
      throw UsageError("plan takes one scenario file");
  }
  if (path.empty()) throw UsageError("plan needs a scenario file");
  refuse_sets(sets, {"output"}, "would be ignored: plan writes the plan's JSON (to --out or standard output)");
  const Scenario s = load_scenario(path, sets, lo);
  if (!s.jobs.empty())
    throw InputError(s.mark("jobs"), "plan writes one training scenario's plan, expected a job's own file, not jobs:");
  if (!s.sweep.empty())
    std::cerr << s.mark("sweep").str()
              << ": warning: plan writes the scenario as written; sweep points are not planned\n";
  if (!out.empty()) check_output(SourceMark{"--out", 0, 0}, "--out", out, scenario_inputs(s));
  const std::string json = plan_to_json(scenario_plan(s).plan);
  if (out.empty()) {
    std::cout << json;
    return 0;
  }
  make_parent_dirs(out);
  write_file_atomically(out, json);
  return 0;
}

}  // namespace clustersim
