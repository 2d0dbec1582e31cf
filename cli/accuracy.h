// `clustersim accuracy DIR`: every scenario in DIR (recursively) with a `reference:`
// block is run as `run` would run it, and its metric is set against the published value.
#pragma once

#include <string>
#include <vector>

namespace clustersim {

struct AccuracyCase {
  std::string file;
  std::string name;
  std::string kind;  // training | serving
  std::string source, metric, unit;
  double reference = 0;  // in the metric's own unit (seconds, fractions, ...)
  double predicted = 0;
  double error_pct = 0;  // (predicted - reference) / reference, in %
  // reference.attention_flops: the source's count of attention FLOPs, and its model FLOPs
  // over the simulator's (1 for "causal"); `predicted` is in the source's count.
  std::string attention_flops = "causal";
  double flops_count_factor = 1;
  // Training on one GPU model: the memory the model says a GPU needs and has. A published
  // run that the memory check would refuse is the memory model's own miss, reported
  // beside the time rather than in place of it.
  double memory_need_bytes = 0, memory_have_bytes = 0;
  bool memory_fits() const { return memory_have_bytes <= 0 || memory_need_bytes <= memory_have_bytes; }
  // reference.unstated: the settings the source leaves open, and the band the predictions
  // at every combination of their values span with `predicted` (combinations run and
  // refused).
  std::vector<std::string> unstated;
  double band_low = 0, band_high = 0;
  int band_points = 0, band_refused = 0;
  bool reference_in_band() const { return reference >= band_low && reference <= band_high; }
  // Each combination that ran: its values (in `unstated` order, as written in the file) and
  // its prediction, in the order the combinations were tried; and which of them comes
  // nearest the reference (the first of equals). What reproduces the published number is a
  // finding about the source's run, not a setting the headline takes.
  struct BandPoint {
    std::vector<std::string> values;
    double predicted = 0;
  };
  std::vector<BandPoint> band;
  size_t band_nearest = 0;
};

// What-ifs over a folder of published runs: `--set key=value` applied to every case, as
// `run --set` would, `--only PATTERN` keeping the cases whose file name (without .yaml)
// matches one of the shell patterns, and `--kind` the cases of one kind (a training key
// set on a serving scenario is refused, so a training what-if over a mixed folder needs it).
struct AccuracyOptions {
  int jobs = 1;
  std::vector<std::string> sets;
  std::vector<std::string> only;
  std::string kind;  // "" (both) | training | serving
};

struct AccuracyReport {
  std::vector<std::string> sets, only;  // the options the report was made with
  std::string kind;
  std::vector<AccuracyCase> cases;  // in file order
  std::vector<std::string> failed;  // "FILE:LINE:COL: error: ..." of scenarios that did not run
  double mape_pct = 0, max_abs_error_pct = 0;
  double training_mape_pct = 0, training_max_abs_error_pct = 0;
  double serving_mape_pct = 0, serving_max_abs_error_pct = 0;
  int training_cases = 0, serving_cases = 0;
  int unstated_cases = 0, in_band_cases = 0;  // cases with reference.unstated; their reference within the band
};

// Runs every scenario under `dir` that has a reference (and matches `only`), on `jobs`
// threads (the report is the same whatever the count).
AccuracyReport run_accuracy(const std::string& dir, const AccuracyOptions& options);
std::string accuracy_table(const AccuracyReport& r);
std::string accuracy_json(const AccuracyReport& r);
int cmd_accuracy(const std::vector<std::string>& args);

}  // namespace clustersim
