// `clustersim search`: the fastest valid training layout for the model, cluster and batch.
#include "scenarios/scenario.h"
#include "sim/search.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"

namespace clustersim {

int cmd_search(const std::vector<std::string>& args) {
  std::string path;
  std::vector<std::string> sets;
  SearchOptions opt;
  bool json = false;
  LoadOptions lo;  // --allow-large: past the work budgets
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--set") {
      sets.push_back(need_value(args, i));
    } else if (a.rfind("--set=", 0) == 0) {
      sets.push_back(a.substr(6));
    } else if (a == "--top") {
      opt.top_k = static_cast<int>(need_count(args, i, a, 1000));
    } else if (a == "--jobs" || a == "-j") {
      opt.jobs = static_cast<int>(need_count(args, i, a, 1024));
    } else if (a == "--refine") {
      opt.refine = need_value(args, i);
      if (opt.refine != "flow" && opt.refine != "analytic")
        throw InputError(SourceMark{a, 0, 0}, "expected flow or analytic, got '" + opt.refine + "'");
    } else if (a == "--allow-large") {
      lo.allow_large = true;
    } else if (a == "--json") {
      json = true;
    } else if (!a.empty() && a[0] == '-') {
      throw UsageError("unknown option '" + a + "' for search");
    } else if (path.empty()) {
      path = a;
    } else {
      throw UsageError("search takes one scenario file, got '" + path + "' and '" + a + "'");
    }
  }
  if (path.empty()) throw UsageError("search needs a scenario file");
  const Scenario s = load_scenario(path, sets, lo);
  const SearchResult r = search_layouts(s, opt);
  std::cout << (json ? search_json(r) : search_table(r));
  std::cerr << search_timing(r);
  return r.best >= 0 ? 0 : 1;
}

}  // namespace clustersim
