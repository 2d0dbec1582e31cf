// `clustersim search`: the fastest valid training layout for the model, cluster and batch.
#include "sim/search.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "reports/output_file.h"
#include "reports/sqlite_writer.h"
#include "scenarios/scenario.h"
#include "sim/sweep.h"

namespace clustersim {
namespace {

// The simulated candidates as rows of the sweep_results table, fastest first (point 0 the
// best): sweep "search NAME", fingerprint "search-" + the scenario's, objective
// iteration_time_s, metrics the candidate's JSON object as --json prints it.
std::vector<SweepRow> search_rows(const SearchResult& r, const std::string& fingerprint) {
  std::vector<SweepRow> rows;
  for (size_t i = 0; i < r.top.size(); ++i) {
    const SearchCandidate& c = r.top[i];
    SweepRow row;
    row.sweep = "search " + r.name;
    row.fingerprint = "search-" + fingerprint;
    row.point = static_cast<int64_t>(i);
    row.settings = c.settings;
    row.status = "ok";
    row.objective = "iteration_time_s";
    row.value = c.simulated_s;
    row.metrics_json = candidate_json(c);
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace

int cmd_search(const std::vector<std::string>& args) {
  refuse_repeated(args, {"--top", "--jobs", "--refine", "--out"});
  std::string path;
  std::vector<std::string> sets;
  SearchOptions opt;
  bool json = false;
  std::string out;  // the candidates' rows go to this database (default: output.sqlite)
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
        throw UsageError("--refine expects flow or analytic, got '" + opt.refine + "'");
    } else if (a == "--out") {
      out = need_value(args, i);
      if (out.empty()) throw InputError(SourceMark{"--out", 0, 0}, "expected a database file name, got ''");
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
  // A row's settings are its pairs joined by ", ": a value holding one would read back as two.
  for (const std::string& set : sets)
    if (set.find(", ") != std::string::npos)
      throw InputError(SourceMark{"--set", 0, 0},
                       "'" + set +
                           "' holds ', ', which the rows' settings separate pairs with, expected the value "
                           "without it (a list as [a,b])");
  const Scenario s = load_scenario(path, sets, lo);
  if (!s.sweep.empty())
    std::cerr << s.mark("sweep").str()
              << ": warning: search starts from the scenario as written; sweep points are not searched\n";
  // search simulates its candidates without a timeline: say so rather than leave a trace the
  // scenario names silently unwritten (a scenario made for run keeps working here).
  if (!s.output_trace.empty())
    std::cerr << s.mark("output.trace").str()
              << ": warning: search writes no trace; run the layout it chooses (the --set pairs of its rows in "
                 "output.sqlite, or its table) to get one\n";
  out = database_output(s, out);
  SearchResult r = search_layouts(s, opt);
  // A candidate is the scenario with the user's own --set pairs, then its own: both rerun it.
  std::string own;
  for (const std::string& set : sets) own += (own.empty() ? "" : ", ") + set;
  if (!own.empty())
    for (SearchCandidate& c : r.top) c.settings = own + (c.settings.empty() ? "" : ", " + c.settings);
  if (!out.empty() && !r.top.empty()) {
    make_parent_dirs(out);
    SweepStore store(out);
    // A rerun (another --top or --refine) replaces the scenario's ranking whole: rows of
    // an earlier one left beside it would clash with its point numbers.
    const std::string fingerprint = scenario_fingerprint(s);
    store.replace("search-" + fingerprint, search_rows(r, fingerprint));
  }
  std::cout << (json ? search_json(r) : search_table(r));
  std::cerr << search_timing(r);
  return r.best >= 0 ? 0 : 1;
}

}  // namespace clustersim
