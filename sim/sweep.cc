#include "sim/sweep.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "reports/output_file.h"
#include "reports/progress.h"
#include "reports/sqlite_writer.h"
#include "scenarios/error.h"
#include "scenarios/readers.h"
#include "scenarios/yaml_tree.h"
#include "sim/run.h"
#include "sim/serving.h"

namespace clustersim {
namespace {

// A value as the user would type it after key=: scalars as written, others as flow YAML.
// A swept value as the settings string writes it, which is also how --set reads it back: a
// scalar that holds a comma, a quote or a backslash, or is empty or padded, in YAML's double
// quotes (otherwise "a, b=c" would read as two settings, and two points could share a key).
std::string value_text(const YNode& v) {
  if (v.kind == YNode::Kind::Scalar) {
    const std::string& t = v.scalar;
    if (!t.empty() && t.find_first_of(",\"\\") == std::string::npos && t.front() != ' ' && t.back() != ' ') return t;
    std::string q = "\"";
    for (const char c : t) q += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
    return q + "\"";
  }
  if (v.kind == YNode::Kind::Null) return "null";
  std::string t = emit_yaml(v);
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  for (char& c : t)
    if (c == '\n') c = ' ';
  return t;
}

const Metrics* metrics_of(const SweepPointResult& r) { return r.status == "ok" ? &r.metrics : nullptr; }

double metric_value(const Metrics& m, const std::string& name, bool& found) {
  const double* v = find_metric(m, name);
  found = v != nullptr;
  return v ? *v : 0.0;
}

std::string objective_for(const std::string& rank_by, bool inference) {
  if (!rank_by.empty()) return rank_by;
  return inference ? "goodput_requests_per_s" : "iteration_time_s";
}

}  // namespace

bool higher_is_better(const std::string& metric) {
  static const std::set<std::string> kHigher = {"tokens_per_s",
                                                "tflops_per_gpu",
                                                "hardware_tflops_per_gpu",
                                                "mfu",
                                                "throughput_tokens_per_s",
                                                "requests_per_s",
                                                "goodput_requests_per_s",
                                                "slo_attainment",
                                                "prefix_cache_hit_rate"};
  return kHigher.count(metric) > 0;
}

std::vector<SweepPoint> sweep_points(const Scenario& base, size_t max_points) {
  std::vector<SweepPoint> out;
  // Counted before any is made: 10^20 points is refused, not allocated.
  size_t total = 1;
  for (const auto& [key, list] : base.sweep) {
    if (total > max_points / std::max<size_t>(1, list.seq.size()) + 1 || total * list.seq.size() > max_points)
      throw InputError(base.mark("sweep"), "the sweep has more than " + std::to_string(max_points) +
                                               " points (the budget of one sweep; --allow-large raises it to " +
                                               std::to_string(kMaxSweepPointsLarge) + "), expected fewer values per key");
    total *= list.seq.size();
  }
  std::vector<size_t> digit(base.sweep.size(), 0);
  for (size_t i = 0; i < total; ++i) {
    SweepPoint p;
    p.index = static_cast<int64_t>(i);
    for (size_t k = 0; k < base.sweep.size(); ++k) {
      const auto& [key, list] = base.sweep[k];
      const YNode& v = list.seq[digit[k]];
      p.overrides.emplace_back(key, v);
      p.settings += (k ? ", " : "") + key + "=" + value_text(v);
    }
    out.push_back(std::move(p));
    for (size_t k = base.sweep.size(); k-- > 0;) {  // the last key varies fastest
      if (++digit[k] < base.sweep[k].second.seq.size()) break;
      digit[k] = 0;
    }
  }
  return out;
}

std::string scenario_fingerprint(const Scenario& base) {
  uint64_t h = 14695981039346656037ull;
  auto mix = [&](const std::string& text) {
    for (unsigned char c : text) {
      h ^= c;
      h *= 1099511628211ull;
    }
  };
  mix(base.config_yaml);
  // The files the points read are part of what they are: a topology file, a calibration
  // profile or a request trace edited between two sweeps must not let the second reuse the
  // first's rows (the scenario's own text and its includes, less the sweep: block that
  // says which points, are in config_yaml already).
  auto mix_file = [&](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream bytes;
    if (in) bytes << in.rdbuf();
    mix("\n" + path + (in ? "\n" + bytes.str() : std::string("\n(missing)")));
  };
  if (!base.cluster.topology_file.empty()) mix_file(base.cluster.topology_file);
  if (!base.calibration.empty()) mix_file(base.calibration);
  if (!base.serving.trace.empty()) mix_file(base.serving.trace);
  for (const auto& [key, values] : base.sweep)
    if (key == "cluster.topology_file" || key == "calibration" || key == "inference.arrivals.trace")
      for (const YNode& v : values.seq)
        if (v.kind == YNode::Kind::Scalar) mix_file(as_path(v, key));  // as the point's key reads it
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

SweepPointResult run_sweep_point(const std::string& path, const std::vector<std::string>& sets, const SweepPoint& p,
                                 bool allow_large) {
  SweepPointResult r;
  r.index = p.index;
  r.settings = p.settings;
  try {
    Scenario s = load_scenario(path, sets, p.overrides, LoadOptions{allow_large});
    s.output_sqlite.clear();
    s.output_trace.clear();
    s.sweep.clear();
    RunOptions ro;
    ro.record_link_usage = false;
    ro.keep_spans = false;
    r.metrics = s.inference ? run_serving(s).metrics : run_training(s, ro).metrics;
    r.status = "ok";
  } catch (const InputError& e) {
    r.status = "invalid";
    r.reason = e.what();
  } catch (const std::exception& e) {
    r.status = "error";
    r.reason = e.what();
  }
  return r;
}

SweepPointResult reused_result(const SweepPoint& p, const SweepRow& row) {
  SweepPointResult r;
  r.index = p.index;
  r.settings = p.settings;
  r.status = row.status;
  r.reason = row.reason;
  r.metrics = parse_metrics_json(row.metrics_json);
  r.reused = true;
  return r;
}

SweepRow sweep_row(const SweepReport& rep, const SweepPointResult& r) {
  SweepRow row;
  row.sweep = rep.name;
  row.fingerprint = rep.fingerprint;
  row.point = r.index;
  row.settings = r.settings;
  row.status = r.status;
  row.reason = r.reason;
  row.objective = rep.objective;
  bool found = false;
  row.value = metric_value(r.metrics, rep.objective, found);
  row.metrics_json = metrics_json(r.metrics);
  return row;
}

SweepReport run_sweep(const std::string& path, const SweepOptions& opt) {
  const Scenario base = load_scenario(path, opt.sets, LoadOptions{opt.allow_large});
  if (base.sweep.empty())
    throw InputError(SourceMark{path, 1, 1}, "no sweep: block, expected sweep: {key: [values...]}");
  SweepReport rep;
  rep.name = base.name;
  rep.fingerprint = scenario_fingerprint(base);
  rep.objective = objective_for(opt.rank_by, base.inference);
  rep.higher_is_better = higher_is_better(rep.objective);
  const std::vector<SweepPoint> all = sweep_points(base, opt.allow_large ? kMaxSweepPointsLarge : kMaxSweepPoints);
  rep.points = static_cast<int64_t>(all.size());
  std::vector<const SweepPoint*> todo;
  if (!opt.restrict_points) {
    for (const SweepPoint& p : all) todo.push_back(&p);
  } else {
    for (int64_t i : opt.only) todo.push_back(&all.at(static_cast<size_t>(i)));
  }
  rep.results.resize(todo.size());

  // A database that exists is read for the points it holds; a new one is made with the
  // first row saved, so a sweep refused before any (its objective) leaves none behind.
  std::unique_ptr<SweepStore> store;
  std::error_code exists_ec;
  if (!opt.database.empty() && std::filesystem::exists(opt.database, exists_ec))
    store = std::make_unique<SweepStore>(opt.database);
  // Points already in the database are not run again.
  std::vector<size_t> run;
  for (size_t i = 0; i < todo.size(); ++i) {
    SweepRow row;
    if (store && store->find(rep.fingerprint, todo[i]->settings, row) && row.status != "error") {
      rep.results[i] = reused_result(*todo[i], row);
    } else {
      run.push_back(i);
    }
  }

  Progress progress("sweep", static_cast<int64_t>(run.size()), opt.progress);
  std::mutex sink;
  std::exception_ptr failure;
  // Rows reach the database in point order whatever the order the threads finish in, so
  // two identical sweeps write the same bytes; a killed sweep keeps the prefix it saved.
  std::vector<char> done(run.size(), 0);
  size_t saved = 0;
  auto finish = [&](size_t k, SweepPointResult r) {
    std::lock_guard<std::mutex> lock(sink);
    rep.results[run[k]] = std::move(r);
    done[k] = 1;
    progress.tick(rep.results[run[k]].settings);
    try {
      for (; saved < run.size() && done[saved]; ++saved) {
        if (!store && !opt.database.empty()) {
          make_parent_dirs(opt.database);
          store = std::make_unique<SweepStore>(opt.database);
        }
        if (store) store->put(sweep_row(rep, rep.results[run[saved]]));
      }
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
  };
  // The objective is checked on the first point that runs, before the others start: a
  // metric no run has is refused at once, not after the whole sweep.
  auto check_objective = [&](const SweepPointResult& r) {
    bool found = false;
    metric_value(r.metrics, rep.objective, found);
    if (!found)
      throw InputError(SourceMark{"--rank-by", 0, 0}, "no metric '" + rep.objective +
                                                          "' in the results, expected one of the run's --json "
                                                          "metrics, e.g. iteration_time_s or mfu");
  };
  // Nothing is saved until the objective has been checked: the points before the first
  // that runs wait for it.
  size_t first = 0;
  std::vector<SweepPointResult> waiting;
  for (; first < run.size(); ++first) {
    SweepPointResult r = run_sweep_point(path, opt.sets, *todo[run[first]], opt.allow_large);
    const bool ok = r.status == "ok";
    if (ok) check_objective(r);
    waiting.push_back(std::move(r));
    if (ok) {
      ++first;
      break;
    }
  }
  for (size_t k = 0; k < waiting.size(); ++k) finish(k, std::move(waiting[k]));
  std::atomic<size_t> next{first};
  auto worker = [&] {
    for (;;) {
      const size_t k = next.fetch_add(1);
      if (k >= run.size()) return;
      {
        std::lock_guard<std::mutex> lock(sink);
        if (failure) return;
      }
      finish(k, run_sweep_point(path, opt.sets, *todo[run[k]], opt.allow_large));
    }
  };
  const int jobs = std::max(1, std::min<int>(opt.jobs, static_cast<int>(std::max<size_t>(1, run.size()))));
  std::vector<std::thread> threads;
  for (int j = 1; j < jobs; ++j) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();
  progress.finish();
  if (failure) std::rethrow_exception(failure);
  // A sweep resumed whole ran no point to check the objective on: its first stored one is.
  if (run.empty())
    for (const SweepPointResult& r : rep.results)
      if (r.status == "ok") {
        check_objective(r);
        break;
      }
  return rep;
}

namespace {

// Valid results best first, ties by point index.
std::vector<const SweepPointResult*> ranked(const SweepReport& r) {
  std::vector<const SweepPointResult*> ok;
  for (const SweepPointResult& x : r.results)
    if (metrics_of(x)) ok.push_back(&x);
  auto value = [&](const SweepPointResult* x) {
    bool found = false;
    return metric_value(x->metrics, r.objective, found);
  };
  std::stable_sort(ok.begin(), ok.end(), [&](const SweepPointResult* a, const SweepPointResult* b) {
    const double va = value(a), vb = value(b);
    if (va != vb) return r.higher_is_better ? va > vb : va < vb;
    return a->index < b->index;
  });
  return ok;
}

}  // namespace

std::string sweep_table(const SweepReport& r) {
  const auto ok = ranked(r);
  const bool inference = !ok.empty() && [&] {
    bool f = false;
    metric_value(ok.front()->metrics, "throughput_tokens_per_s", f);
    return f;
  }();
  std::vector<std::string> columns =
      inference
          ? std::vector<std::string>{"throughput_tokens_per_s", "goodput_requests_per_s", "ttft_s_p99", "tpot_s_p99"}
          : std::vector<std::string>{"iteration_time_s", "tokens_per_s", "mfu", "peak_memory_per_gpu_bytes"};
  if (std::find(columns.begin(), columns.end(), r.objective) == columns.end())
    columns.insert(columns.begin(), r.objective);
  int64_t reused = 0;
  for (const SweepPointResult& x : r.results) reused += x.reused;
  std::string out = "sweep " + r.name + ": " + std::to_string(r.results.size()) + " point(s), " +
                    std::to_string(ok.size()) + " valid, ranked by " + r.objective +
                    (r.higher_is_better ? " (higher is better)" : " (lower is better)");
  if (reused > 0) out += "; " + std::to_string(reused) + " taken from the database";
  out += "\n";
  size_t width = 8;
  for (const auto* x : ok) width = std::max(width, x->settings.size());
  char buf[512];
  std::snprintf(buf, sizeof buf, "%5s  %-*s", "rank", static_cast<int>(width), "settings");
  out += buf;
  for (const std::string& c : columns) {
    std::snprintf(buf, sizeof buf, "  %26s", c.c_str());
    out += buf;
  }
  out += "\n";
  int rank = 0;
  for (const auto* x : ok) {
    std::snprintf(buf, sizeof buf, "%5d  %-*s", ++rank, static_cast<int>(width), x->settings.c_str());
    out += buf;
    for (const std::string& c : columns) {
      bool found = false;
      const double v = metric_value(x->metrics, c, found);
      std::string text = "-";
      if (found) {
        char num[64];
        if (c.size() > 6 && c.compare(c.size() - 6, 6, "_bytes") == 0)
          std::snprintf(num, sizeof num, "%.2f GiB", v / (1ull << 30));
        else
          std::snprintf(num, sizeof num, "%.5g", v);
        text = num;
      }
      std::snprintf(buf, sizeof buf, "  %26s", text.c_str());
      out += buf;
    }
    out += "\n";
  }
  bool header = false;
  for (const SweepPointResult& x : r.results) {
    if (x.status == "ok") continue;
    if (!header) out += "not run:\n";
    header = true;
    out += "  " + x.settings + "  [" + x.status + "] " + x.reason + "\n";
  }
  return out;
}

std::string sweep_json(const SweepReport& r) {
  const auto ok = ranked(r);
  std::map<int64_t, int> rank_of;
  for (size_t i = 0; i < ok.size(); ++i) rank_of[ok[i]->index] = static_cast<int>(i) + 1;
  std::string out = "{\"name\": \"" + json_escape(r.name) + "\", \"fingerprint\": \"" + r.fingerprint +
                    "\", \"objective\": \"" + json_escape(r.objective) +
                    "\", \"higher_is_better\": " + (r.higher_is_better ? "true" : "false") +
                    ", \"points\": " + std::to_string(r.results.size()) + ", \"valid\": " + std::to_string(ok.size()) +
                    ", \"results\": [";
  bool first = true;
  auto emit = [&](const SweepPointResult& x) {
    out += first ? "\n  " : ",\n  ";
    first = false;
    out += "{\"point\": " + std::to_string(x.index) + ", \"settings\": \"" + json_escape(x.settings) +
           "\", \"status\": \"" + x.status + "\"";
    if (x.status == "ok") {
      out += ", \"rank\": " + std::to_string(rank_of[x.index]) + ", \"metrics\": " + metrics_json(x.metrics);
    } else {
      out += ", \"reason\": \"" + json_escape(x.reason) + "\"";
    }
    out += "}";
  };
  for (const auto* x : ok) emit(*x);
  for (const SweepPointResult& x : r.results)
    if (x.status != "ok") emit(x);
  out += "\n]}\n";
  return out;
}

std::string metrics_json(const Metrics& m) {
  std::string out = "{";
  for (size_t i = 0; i < m.size(); ++i)
    out += (i ? ", \"" : "\"") + json_escape(m[i].first) + "\": " + format_number(m[i].second);
  return out + "}";
}

Metrics parse_metrics_json(const std::string& text) {
  Metrics m;
  size_t at = 0;
  for (;;) {
    const size_t q = text.find('"', at);
    if (q == std::string::npos) break;
    const size_t e = text.find('"', q + 1);
    if (e == std::string::npos) break;
    const std::string key = text.substr(q + 1, e - q - 1);
    const size_t colon = text.find(':', e);
    if (colon == std::string::npos) break;
    size_t v = colon + 1;
    while (v < text.size() && text[v] == ' ') ++v;
    char* end = nullptr;
    double value = std::strtod(text.c_str() + v, &end);
    if (end == text.c_str() + v) {  // null: a value that was not finite
      value = std::numeric_limits<double>::quiet_NaN();
      end = const_cast<char*>(text.c_str()) + std::min(text.size(), v + 4);
    }
    m.emplace_back(key, value);
    at = static_cast<size_t>(end - text.c_str());
  }
  return m;
}

}  // namespace clustersim
