// `clustersim sweep`: every point of a scenario's sweep: block, ranked.
#include "scenarios/scenario.h"
#include "cli/output.h"
#include "sim/sweep.h"
#include "cli/sweep_mpi.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"

namespace clustersim {

int cmd_sweep(const std::vector<std::string>& args) {
  refuse_repeated(args, {"--jobs", "--out", "--rank-by"});
  std::string path;
  SweepOptions opt;
  bool json = false, mpi = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--set") {
      opt.sets.push_back(need_value(args, i));
    } else if (a.rfind("--set=", 0) == 0) {
      opt.sets.push_back(a.substr(6));
    } else if (a == "--jobs" || a == "-j") {
      opt.jobs = static_cast<int>(need_count(args, i, a, 1024));
    } else if (a == "--out") {
      opt.database = need_value(args, i);
      if (opt.database.empty()) throw InputError(SourceMark{"--out", 0, 0}, "expected a database file name, got ''");
    } else if (a == "--rank-by") {
      opt.rank_by = need_value(args, i);
      if (opt.rank_by.empty()) throw InputError(SourceMark{"--rank-by", 0, 0}, "expected a metric name, got ''");
    } else if (a == "--allow-large") {
      opt.allow_large = true;
    } else if (a == "--json") {
      json = true;
    } else if (a == "--mpi") {
      mpi = true;
    } else if (!a.empty() && a[0] == '-') {
      throw UsageError("unknown option '" + a + "' for sweep");
    } else if (path.empty()) {
      path = a;
    } else {
      throw UsageError("sweep takes one scenario file, got '" + path + "' and '" + a + "'");
    }
  }
  if (path.empty()) throw UsageError("sweep needs a scenario file");
  refuse_sets(opt.sets, {"output.trace"},
              "would be ignored: a sweep writes its points to its database (output.sqlite or --out), no trace");
  {
    const Scenario s = load_scenario(path, opt.sets, LoadOptions{opt.allow_large});
    // Every point sets its swept keys after the --set pairs: one on a swept key would be lost.
    for (const std::string& set : opt.sets) {
      const std::string key = set.substr(0, set.find('='));
      for (const auto& [swept, values] : s.sweep)
        if (swept == key)
          throw InputError(SourceMark{"--set", 0, 0},
                           key + " is swept (sweep." + key +
                               " sets it at every point), expected a key the sweep leaves, or --set sweep." + key +
                               "=[...] to change its list");
    }
    opt.database = database_output(s, opt.database);
  }
  if (mpi) return sweep_mpi(path, opt, json);
  const SweepReport r = run_sweep(path, opt);
  std::cout << (json ? sweep_json(r) : sweep_table(r));
  for (const SweepPointResult& x : r.results)
    if (x.status == "ok") return 0;
  return 1;  // no point could run
}

}  // namespace clustersim
