// `clustersim report RUN.sqlite --html out.html`: one self-contained HTML file (inline
// SVG, CSS and JS; nothing fetched) for one run of a clustersim database.
//
// Training runs: the summary, a time breakdown (compute, exposed communication per
// group kind, pipeline bubble, idle), a zoomable timeline (a lane per rank × stream,
// coloured by op kind, a tooltip per span), memory per pipeline stage, and a link
// utilization heat map. When the database also holds a run of the same name from the
// other source (a real run beside a simulated one, as `validate` writes), a sim-vs-real
// scatter of op durations and an error table by op name. Inference runs: the summary,
// latency CDFs (TTFT, TPOT, end to end), throughput over time and KV-cache utilization.
//
// Charts are SVG written here, so they are in the file whether or not scripts run; the
// timeline is drawn by a small script from the spans embedded as JSON.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace clustersim {

struct ReportOptions {
  int64_t run_id = -1;         // -1: the last complete run
  int64_t max_spans = 300000;  // timeline budget: whole ranks are kept while it lasts
  bool max_spans_given = false;  // --max-spans was written (a serving run has no timeline to budget)
  int time_bins = 120;         // heat map and throughput resolution
  // The timeline's selection (empty: all): ranks (a mirror rank shows its
  // representative's spans under its own number), pipeline stages (from the PP groups),
  // and streams ("compute", "tp", "dp", ...).
  std::vector<int64_t> ranks;
  std::vector<int64_t> stages;
  std::vector<std::string> streams;
};

// The database is not what a report reads: not SQLite, not clustersim's, or without the
// run asked for (`no_such_run`). The reader's input is wrong, not the machine.
struct ReportInputError : std::runtime_error {
  explicit ReportInputError(const std::string& what, bool no_such_run = false)
      : std::runtime_error(what), no_such_run(no_such_run) {}
  bool no_such_run;
};

// Throws ReportInputError, std::runtime_error (a database that cannot be opened or read)
// or std::invalid_argument (a timeline selection that matches nothing); writes `out`
// whole or not at all.
void write_html_report(const std::string& db_path, const std::string& out_path, const ReportOptions& opt = {});
// The same page as a string, for a caller that writes it itself.
std::string render_html_report(const std::string& db_path, const ReportOptions& opt = {});

}  // namespace clustersim
