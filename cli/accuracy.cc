#include "cli/accuracy.h"

#include <fnmatch.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "cli/args.h"
#include "reports/summary.h"
#include "scenarios/scenario.h"
#include "sim/run.h"
#include "sim/serving.h"

namespace clustersim {
namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Whether a file's own text opens a `reference:` block (a scenario's shared includes
// have none and are not scenarios by themselves).
bool has_reference_block(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("reference:", 0) == 0) return true;
  return false;
}

// The factor that turns a value in `unit` into the metric's own unit, or throws
// InputError when the unit cannot describe the metric.
double unit_factor(const Scenario& s) {
  const std::string& m = s.reference.metric;
  const std::string& u = s.reference.unit;
  const bool time = (ends_with(m, "_s") || m.find("_s_") != std::string::npos) && m.find("_per_s") == std::string::npos;
  const bool fraction = m == "mfu" || m.find("fraction") != std::string::npos ||
                        m.find("utilization") != std::string::npos || m == "slo_attainment" ||
                        m.find("hit_rate") != std::string::npos;
  // The units that do measure the metric, for the message.
  const std::string own = time       ? "s, ms or us"
                          : fraction ? "% or fraction"
                          : m.find("tokens_per_s") != std::string::npos ? "tokens/s"
                          : m.find("tflops") != std::string::npos ? "TFLOP/s"
                          : m.find("requests_per_s") != std::string::npos ? "requests/s"
                                                                          : "none (the metric's own, unwritten)";
  auto refuse = [&]() -> double {
    throw InputError(s.mark("reference.unit"), "reference.unit '" + u + "' does not measure " + m + ", expected " + own);
  };
  const double factor = [&] {
    if (u.empty()) return 1.0;
    if (u == "s" || u == "ms" || u == "us") {
      if (!time) return refuse();
      return u == "s" ? 1.0 : u == "ms" ? 1e-3 : 1e-6;
    }
    if (u == "%" || u == "fraction") {
      if (!fraction) return refuse();
      return u == "%" ? 0.01 : 1.0;
    }
    if (u == "tokens/s" && m.find("tokens_per_s") == std::string::npos) return refuse();
    if (u == "TFLOP/s" && m.find("tflops") == std::string::npos) return refuse();
    if (u == "requests/s" && m.find("requests_per_s") == std::string::npos) return refuse();
    return 1.0;
  }();
  // A fraction is at most 1 (100 %).
  if (fraction && s.reference.value * factor > 1.0)
    throw InputError(s.mark("reference.value"), "reference.value of " + m + " is " + format_number(s.reference.value) +
                                                    (u.empty() ? "" : " " + u) + ", past " +
                                                    (u == "%" ? "100 %" : "1") + ", expected a fraction of at most " +
                                                    (u == "%" ? "100" : "1"));
  return factor;
}

// The scenario's metric, in the source's count, and (training on one GPU model) the
// memory the run needs and has.
struct Prediction {
  double value = 0;
  double flops_count_factor = 1;
  double memory_need_bytes = 0, memory_have_bytes = 0;
};

Prediction predict(Scenario& s) {
  s.output_sqlite.clear();  // accuracy writes nothing
  s.output_trace.clear();
  Prediction p;
  Metrics metrics;
  if (s.inference) {
    metrics = run_serving(s, false, false).metrics;
  } else {
    RunOptions opt;
    opt.record_link_usage = false;
    opt.keep_spans = false;
    // One GPU model: the time is predicted whatever the memory check says, which is
    // reported beside it. A mixed cluster keeps the planner's check, stage by stage.
    opt.check_memory = !s.cluster.one_gpu_model();
    const RunOutcome out = run_training(s, opt);
    metrics = out.metrics;
    // A source that counts attention over the whole square counts the causal products
    // twice: the same step time is a larger FLOP rate in its count.
    if (s.reference.attention_flops == "full" && out.plan.model_flops_per_rank > 0)
      p.flops_count_factor =
          (out.plan.model_flops_per_rank + out.plan.causal_attention_flops_per_rank) / out.plan.model_flops_per_rank;
    const double* need = find_metric(metrics, "peak_memory_per_gpu_bytes");
    if (!opt.check_memory && need && *need > 0) {
      p.memory_need_bytes = std::round(*need);  // whole bytes
      p.memory_have_bytes = std::round(s.cluster.node.gpu.hbm_bytes);  // whole bytes
    }
  }
  // What a run takes as given (its layout, counts of requests, ranks, events) or counts of
  // its own work is not a prediction a published measurement can check.
  static const std::set<std::string> kNotPredictions = {"iterations",
                                                        "requests",
                                                        "gpus",
                                                        "dp",
                                                        "tp",
                                                        "pp",
                                                        "cp",
                                                        "ep",
                                                        "virtual_stages",
                                                        "zero_stage",
                                                        "micro_batches",
                                                        "global_batch",
                                                        "simulated_ranks",
                                                        "events",
                                                        "iteration_cost_memo_hits",
                                                        "iteration_cost_memo_misses",
                                                        "replicas",
                                                        "samples"};
  const double* predicted =
      kNotPredictions.count(s.reference.metric) ? nullptr : find_metric(metrics, s.reference.metric);
  if (!predicted) {
    std::string names;
    for (const auto& [k, v] : metrics)
      if (!kNotPredictions.count(k)) names += (names.empty() ? "" : ", ") + k;
    throw InputError(s.mark("reference.metric"),
                     "reference.metric '" + s.reference.metric +
                         "' is not a metric of this run, expected one of: " + names);
  }
  p.value = *predicted * p.flops_count_factor;
  return p;
}

// A prediction's error against the reference, in %.
double error_pct_of(double predicted, double reference) { return 100.0 * (predicted - reference) / reference; }

// Every combination of the reference's unstated settings, predicted: the band they span
// with the file's own prediction. A combination the scenario refuses (a micro-batch that
// does not divide the batch, a layout that does not fit) is counted, not fatal; a list
// of which none runs is the file's error.
void predict_unstated(const std::string& file, const std::vector<std::string>& sets, const Scenario& s,
                      const std::vector<std::pair<std::string, YNode>>& unstated, AccuracyCase& c) {
  c.band_low = c.band_high = c.predicted;
  std::vector<size_t> at(unstated.size(), 0);
  std::string first_refusal;
  for (;;) {
    std::vector<std::pair<std::string, YNode>> overrides;
    for (size_t k = 0; k < unstated.size(); ++k)
      overrides.emplace_back(unstated[k].first, unstated[k].second.seq[at[k]]);
    try {
      Scenario v = load_scenario(file, sets, overrides);
      const double value = predict(v).value;
      c.band_low = std::min(c.band_low, value);
      c.band_high = std::max(c.band_high, value);
      ++c.band_points;
      AccuracyCase::BandPoint point;
      point.predicted = value;
      for (const auto& [key, node] : overrides) point.values.push_back(node.scalar);
      if (!c.band.empty() &&
          std::fabs(value - c.reference) < std::fabs(c.band[c.band_nearest].predicted - c.reference))
        c.band_nearest = c.band.size();
      c.band.push_back(std::move(point));
    } catch (const std::exception& e) {
      ++c.band_refused;
      if (first_refusal.empty()) first_refusal = e.what();
    }
    size_t k = 0;
    while (k < unstated.size() && ++at[k] == unstated[k].second.seq.size()) at[k++] = 0;
    if (k == unstated.size()) break;
  }
  if (c.band_points == 0)
    throw InputError(s.mark("reference.unstated"),
                     "no combination of reference.unstated runs, expected at least one; the first: " + first_refusal);
}

AccuracyCase run_case(const std::string& file, const std::vector<std::string>& sets) {
  Scenario s = load_scenario(file, sets);
  AccuracyCase c;
  c.file = file;
  c.name = s.name;
  c.kind = s.inference ? "serving" : "training";
  c.source = s.reference.source;
  c.metric = s.reference.metric;
  c.unit = s.reference.unit;
  c.attention_flops = s.reference.attention_flops;
  c.reference = s.reference.value * unit_factor(s);
  const Prediction p = predict(s);
  c.flops_count_factor = p.flops_count_factor;
  c.memory_need_bytes = p.memory_need_bytes;
  c.memory_have_bytes = p.memory_have_bytes;
  c.predicted = p.value;
  c.error_pct = error_pct_of(c.predicted, c.reference);
  // A key the command line sets is no longer open: the what-if fixes it in the band too.
  std::vector<std::pair<std::string, YNode>> open;
  for (const auto& entry : s.reference.unstated)
    if (std::none_of(sets.begin(), sets.end(),
                     [&](const std::string& set) { return set.rfind(entry.first + "=", 0) == 0; })) {
      open.push_back(entry);
      c.unstated.push_back(entry.first);
    }
  if (!open.empty()) predict_unstated(file, sets, s, open, c);
  return c;
}

void summarize(const std::vector<AccuracyCase>& cases, const std::string& kind, double& mape, double& worst, int& n) {
  double sum = 0;
  n = 0;
  worst = 0;
  for (const AccuracyCase& c : cases) {
    if (!kind.empty() && c.kind != kind) continue;
    sum += std::fabs(c.error_pct);
    worst = std::max(worst, std::fabs(c.error_pct));
    ++n;
  }
  mape = n > 0 ? sum / n : 0.0;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string signed_pct(double v) { return (v >= 0 ? "+" : "") + fixed(v, 1) + " %"; }

// The table's predictions to the digits a comparison needs (--json keeps them whole).
std::string significant(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

// A band point's settings as the table prints them: key=value, space-separated.
std::string settings_text(const AccuracyCase& c, const AccuracyCase::BandPoint& p) {
  std::string t;
  for (size_t k = 0; k < c.unstated.size() && k < p.values.size(); ++k)
    t += std::string(k ? " " : "") + c.unstated[k] + "=" + p.values[k];
  return t;
}

// Whether the whole text is a number in JSON's grammar.
bool json_number(const std::string& v) {
  size_t i = 0;
  auto digits = [&] {
    const size_t from = i;
    while (i < v.size() && v[i] >= '0' && v[i] <= '9') ++i;
    return i > from;
  };
  if (i < v.size() && v[i] == '-') ++i;
  if (i < v.size() && v[i] == '0')
    ++i;
  else if (!digits())
    return false;
  if (i < v.size() && v[i] == '.') {
    ++i;
    if (!digits()) return false;
  }
  if (i < v.size() && (v[i] == 'e' || v[i] == 'E')) {
    ++i;
    if (i < v.size() && (v[i] == '+' || v[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == v.size();
}

// A scalar as JSON: a number as a number, true and false as themselves, else a string.
std::string json_scalar(const std::string& v) {
  return json_number(v) || v == "true" || v == "false" ? v : "\"" + json_escape(v) + "\"";
}

// Whether a case's file name (without .yaml) matches one of the --only shell patterns.
bool selected(const fs::path& p, const std::vector<std::string>& only) {
  if (only.empty()) return true;
  const std::string stem = p.stem().string();
  return std::any_of(only.begin(), only.end(),
                     [&](const std::string& pattern) { return fnmatch(pattern.c_str(), stem.c_str(), 0) == 0; });
}

}  // namespace

AccuracyReport run_accuracy(const std::string& dir, const AccuracyOptions& options) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw InputError(SourceMark{dir, 0, 0}, "is not a directory, expected a folder of scenarios");
  std::vector<std::string> files;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it.depth() > 16) it.disable_recursion_pending();  // a loop of links ends here
    const fs::path& p = it->path();
    if (it->is_regular_file(ec) && p.extension() == ".yaml" && has_reference_block(p) && selected(p, options.only))
      files.push_back(p.string());
  }
  std::sort(files.begin(), files.end());
  // A file reached twice (a link beside its target, or two links to one file) is one case: the first name.
  std::set<fs::path> seen;
  files.erase(std::remove_if(files.begin(), files.end(),
                             [&](const std::string& f) {
                               std::error_code e;
                               const fs::path real = fs::canonical(f, e);
                               return !e && !seen.insert(real).second;
                             }),
              files.end());
  if (files.empty()) {
    std::string patterns;
    for (const std::string& o : options.only) patterns += (patterns.empty() ? "" : ", ") + o;
    const std::string which = options.only.empty() ? "" : " whose name matches --only " + patterns;
    throw InputError(SourceMark{dir, 0, 0},
                     "holds no scenario with a reference: block" + which + ", expected at least one");
  }

  struct Slot {
    bool ok = false, skipped = false;
    AccuracyCase c;
    std::string error;
  };
  std::vector<Slot> slots(files.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < files.size(); i = next++) {
      try {
        // The kind is the scenario's own, read before the overrides (which may only fit one kind).
        if (!options.kind.empty() && (load_scenario(files[i]).inference ? "serving" : "training") != options.kind) {
          slots[i].skipped = true;
          continue;
        }
        slots[i].c = run_case(files[i], options.sets);
        slots[i].ok = true;
      } catch (const InputError& e) {
        // The case is named: an error at a --set or an included file's line does not say
        // which case refused it.
        const std::string what = e.what();
        slots[i].error = what.rfind(files[i], 0) == 0 ? what : files[i] + ": " + what;
      } catch (const std::exception& e) {
        slots[i].error = files[i] + ": error: " + e.what();
      }
    }
  };
  const int n = std::max(1, std::min<int>(options.jobs, static_cast<int>(files.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();

  AccuracyReport r;
  r.sets = options.sets;
  r.only = options.only;
  r.kind = options.kind;
  for (Slot& s : slots) {
    if (s.skipped) continue;
    if (s.ok)
      r.cases.push_back(std::move(s.c));
    else
      r.failed.push_back(std::move(s.error));
  }
  int all = 0;
  summarize(r.cases, "", r.mape_pct, r.max_abs_error_pct, all);
  summarize(r.cases, "training", r.training_mape_pct, r.training_max_abs_error_pct, r.training_cases);
  summarize(r.cases, "serving", r.serving_mape_pct, r.serving_max_abs_error_pct, r.serving_cases);
  for (const AccuracyCase& c : r.cases)
    if (!c.unstated.empty()) {
      ++r.unstated_cases;
      r.in_band_cases += c.reference_in_band();
    }
  return r;
}

std::string accuracy_table(const AccuracyReport& r) {
  std::ostringstream o;
  if (!r.sets.empty() || !r.only.empty() || !r.kind.empty()) {
    o << "what-if:";
    for (const std::string& s : r.sets) o << " --set " << s;
    for (const std::string& s : r.only) o << " --only " << s;
    if (!r.kind.empty()) o << " --kind " << r.kind;
    o << "\n\n";
  }
  size_t w = 4;
  for (const AccuracyCase& c : r.cases) w = std::max(w, c.name.size());
  auto pad = [](const std::string& s, size_t n) { return s + std::string(n > s.size() ? n - s.size() : 1, ' '); };
  o << pad("case", w + 2) << pad("kind", 10) << pad("metric", 26) << pad("reference", 14) << pad("predicted", 14)
    << "error\n";
  for (const AccuracyCase& c : r.cases)
    o << pad(c.name, w + 2) << pad(c.kind, 10) << pad(c.metric, 26) << pad(format_number(c.reference), 14)
      << pad(significant(c.predicted, 4), 14) << signed_pct(c.error_pct)
      << (c.memory_fits() ? "" : "  (memory check: " + fixed(c.memory_need_bytes / (1 << 30), 1) + " of " +
                                     fixed(c.memory_have_bytes / (1 << 30), 1) + " GiB)")
      << (c.unstated.empty() ? ""
                             : "  (unstated: " + significant(c.band_low, 4) + " to " + significant(c.band_high, 4) +
                                   (c.reference_in_band() ? ", reference inside" : ", reference outside") +
                                   "; nearest at " + settings_text(c, c.band[c.band_nearest]) + ": " +
                                   signed_pct(error_pct_of(c.band[c.band_nearest].predicted, c.reference)) + ")")
      << "\n";
  o << "\n" << r.cases.size() << " cases: MAPE " << fixed(r.mape_pct, 2) << " %, worst " << fixed(r.max_abs_error_pct, 1)
    << " %\n";
  // A kind with no case (a folder or an --only of one kind) has no line.
  if (r.training_cases > 0)
    o << "  training " << r.training_cases << ": MAPE " << fixed(r.training_mape_pct, 2) << " %, worst "
      << fixed(r.training_max_abs_error_pct, 1) << " %\n";
  if (r.serving_cases > 0)
    o << "  serving  " << r.serving_cases << ": MAPE " << fixed(r.serving_mape_pct, 2) << " %, worst "
      << fixed(r.serving_max_abs_error_pct, 1) << " %\n";
  if (r.unstated_cases > 0)
    o << "  unstated settings: " << r.unstated_cases << " cases predicted over what their sources leave open; "
      << r.in_band_cases << " hold the reference within that band\n";
  int refused = 0;
  for (const AccuracyCase& c : r.cases) refused += !c.memory_fits();
  if (refused > 0)
    o << "  memory: the check would refuse " << refused << " of these runs, which ran on their GPUs\n";
  for (const std::string& f : r.failed) o << "not run: " << f << "\n";
  return o.str();
}

std::string accuracy_json(const AccuracyReport& r) {
  std::string o = "{\"cases\": [";
  for (size_t i = 0; i < r.cases.size(); ++i) {
    const AccuracyCase& c = r.cases[i];
    o += std::string(i ? ", " : "") + "{\"name\": \"" + json_escape(c.name) + "\", \"file\": \"" + json_escape(c.file) +
         "\", \"kind\": \"" + c.kind + "\", \"source\": \"" + json_escape(c.source) + "\", \"metric\": \"" +
         json_escape(c.metric) + "\", \"reference\": " + format_number(c.reference) +
         ", \"predicted\": " + format_number(c.predicted) + ", \"error_pct\": " + format_number(c.error_pct);
    if (c.attention_flops != "causal")
      o += ", \"attention_flops\": \"" + c.attention_flops + "\", \"flops_count_factor\": " +
           format_number(c.flops_count_factor);
    if (c.memory_have_bytes > 0)
      o += ", \"memory_need_bytes\": " + format_number(c.memory_need_bytes) +
           ", \"memory_have_bytes\": " + format_number(c.memory_have_bytes) +
           ", \"memory_fits\": " + (c.memory_fits() ? "true" : "false");
    if (!c.unstated.empty()) {
      std::string keys;
      for (size_t k = 0; k < c.unstated.size(); ++k)
        keys += std::string(k ? ", " : "") + "\"" + json_escape(c.unstated[k]) + "\"";
      o += ", \"unstated\": [" + keys + "], \"band\": [" + format_number(c.band_low) + ", " +
           format_number(c.band_high) + "], \"band_points\": " + std::to_string(c.band_points) +
           ", \"band_refused\": " + std::to_string(c.band_refused) +
           ", \"reference_in_band\": " + (c.reference_in_band() ? "true" : "false");
      o += ", \"band_predictions\": [";
      for (size_t p = 0; p < c.band.size(); ++p) {
        o += std::string(p ? ", " : "") + "{\"settings\": {";
        for (size_t k = 0; k < c.unstated.size() && k < c.band[p].values.size(); ++k)
          o += std::string(k ? ", " : "") + "\"" + json_escape(c.unstated[k]) + "\": " + json_scalar(c.band[p].values[k]);
        o += "}, \"predicted\": " + format_number(c.band[p].predicted) +
             ", \"error_pct\": " + format_number(error_pct_of(c.band[p].predicted, c.reference)) + "}";
      }
      o += "], \"band_nearest\": " + std::to_string(c.band_nearest);
    }
    o += "}";
  }
  // A group without cases has no error: null, not 0.
  auto pct = [](size_t cases, double v) { return cases == 0 ? std::string("null") : format_number(v); };
  o += "], \"mape_pct\": " + pct(r.cases.size(), r.mape_pct) +
       ", \"max_abs_error_pct\": " + pct(r.cases.size(), r.max_abs_error_pct);
  o += ", \"training\": {\"cases\": " + std::to_string(r.training_cases) +
       ", \"mape_pct\": " + pct(r.training_cases, r.training_mape_pct) +
       ", \"max_abs_error_pct\": " + pct(r.training_cases, r.training_max_abs_error_pct) + "}";
  o += ", \"serving\": {\"cases\": " + std::to_string(r.serving_cases) +
       ", \"mape_pct\": " + pct(r.serving_cases, r.serving_mape_pct) +
       ", \"max_abs_error_pct\": " + pct(r.serving_cases, r.serving_max_abs_error_pct) + "}";
  o += ", \"unstated_cases\": " + std::to_string(r.unstated_cases) +
       ", \"in_band_cases\": " + std::to_string(r.in_band_cases);
  o += ", \"memory_refused\": [";
  bool first = true;
  for (const AccuracyCase& c : r.cases)
    if (!c.memory_fits()) {
      o += std::string(first ? "" : ", ") + "\"" + json_escape(c.name) + "\"";
      first = false;
    }
  o += "], \"failed\": [";
  for (size_t i = 0; i < r.failed.size(); ++i) o += std::string(i ? ", " : "") + "\"" + json_escape(r.failed[i]) + "\"";
  auto list = [](const std::vector<std::string>& v) {
    std::string l;
    for (size_t i = 0; i < v.size(); ++i) l += std::string(i ? ", " : "") + "\"" + json_escape(v[i]) + "\"";
    return "[" + l + "]";
  };
  o += "], \"set\": " + list(r.sets) + ", \"only\": " + list(r.only) + ", \"kind\": \"" + r.kind + "\"";
  return o + "}\n";
}

int cmd_accuracy(const std::vector<std::string>& args) {
  refuse_repeated(args, {"--jobs", "--kind"});
  std::string dir;
  bool json = false;
  AccuracyOptions options;
  options.jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--json") {
      json = true;
    } else if (a == "--set") {
      options.sets.push_back(need_value(args, i));
    } else if (a.rfind("--set=", 0) == 0) {
      options.sets.push_back(a.substr(6));
    } else if (a == "--only") {
      options.only.push_back(need_value(args, i));
    } else if (a == "--kind") {
      options.kind = need_value(args, i);
      if (options.kind != "training" && options.kind != "serving")
        throw UsageError("--kind takes training or serving, got '" + options.kind + "'");
    } else if (a == "--jobs" || a == "-j") {
      options.jobs = static_cast<int>(need_count(args, i, a, 1024));
    } else if (!a.empty() && a[0] == '-') {
      throw std::invalid_argument("unknown option '" + a + "' for accuracy");
    } else if (dir.empty()) {
      dir = a;
    } else {
      throw std::invalid_argument("accuracy takes one folder, got '" + dir + "' and '" + a + "'");
    }
  }
  if (dir.empty()) throw std::invalid_argument("accuracy needs a folder of scenarios");
  refuse_sets(options.sets, {"output", "sweep", "reference"},
              "would be ignored: accuracy writes no run's files, runs no sweep and compares with each file's own "
              "reference, expected a setting of the runs");
  const AccuracyReport r = run_accuracy(dir, options);
  // Nothing ran (an override every case refuses): the errors alone, no empty table; --json
  // still prints its object, with no cases and the failures.
  if (r.cases.empty()) {
    if (json) std::cout << accuracy_json(r);
    for (const std::string& f : r.failed) std::cerr << f << "\n";
    return 1;
  }
  std::cout << (json ? accuracy_json(r) : accuracy_table(r));
  if (!r.failed.empty()) {
    for (const std::string& f : r.failed) std::cerr << f << "\n";
    return 1;
  }
  return 0;
}

}  // namespace clustersim
