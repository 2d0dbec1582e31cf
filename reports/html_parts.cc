#include "reports/html_parts.h"

#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "reports/summary.h"

namespace clustersim::html {

std::string text(sqlite3_stmt* st, int col) {
  const unsigned char* t = sqlite3_column_text(st, col);
  return t ? reinterpret_cast<const char*>(t) : "";
}

Run load_run(Db& db, int64_t id) {
  Run r;
  db.each("SELECT run_id, name, source, kind, network_model, scenario_yaml FROM runs WHERE run_id = ? AND complete = 1",
          {id}, [&](sqlite3_stmt* st) {
            r.id = sqlite3_column_int64(st, 0);
            r.name = text(st, 1);
            r.source = text(st, 2);
            r.kind = text(st, 3);
            r.network_model = text(st, 4);
            r.yaml = text(st, 5);
          });
  if (r.id < 0) throw ReportInputError("no complete run " + std::to_string(id) + " in the database", true);
  db.each("SELECT key, value FROM metrics WHERE run_id = ? ORDER BY rowid", {id},
          [&](sqlite3_stmt* st) { r.metrics.emplace_back(text(st, 0), sqlite3_column_double(st, 1)); });
  return r;
}

std::string esc(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Seconds in a readable unit.
std::string dur(double s) {
  if (s >= 1) return fmt("%.4g s", s);
  if (s >= 1e-3) return fmt("%.4g ms", s * 1e3);
  return fmt("%.4g us", s * 1e6);
}

std::string gib(double b) { return fmt("%.2f GiB", b / (1ull << 30)); }

const char* kind_colour(const std::string& k) {
  if (k == "gemm") return "#4e79a7";
  if (k == "attention") return "#b07aa1";
  if (k == "memory") return "#59a14f";
  if (k == "collective") return "#f28e2b";
  if (k == "send" || k == "recv") return "#e15759";
  return "#9c9c9c";
}

std::string metrics_table(const Run& r) {
  std::string out = "<table class=\"metrics\"><tr><th>metric</th><th>value</th></tr>";
  for (const auto& [k, v] : r.metrics) {
    if (k.rfind("memory_stage_", 0) == 0) continue;
    out += "<tr><td>" + esc(k) + "</td><td class=\"num\">" + esc(format_number(v)) + "</td></tr>";
  }
  return out + "</table>";
}

std::string series_svg(const std::vector<std::pair<std::string, std::vector<std::pair<double, double>>>>& series,
                       const std::string& ylabel, const std::function<std::string(double)>& yt, double ymax_floor,
                       const std::function<std::string(double)>& xt) {
  double tmax = 0, ymax = ymax_floor;
  for (const auto& [n, pts] : series)
    for (const auto& [t, y] : pts) {
      tmax = std::max(tmax, t);
      ymax = std::max(ymax, y);
    }
  Chart c(900, 260, 0, tmax, 0, ymax * 1.05);
  c.axes(
      "time", ylabel, xt ? xt : [](double v) { return dur(v); }, yt);
  const char* colours[] = {"#4e79a7", "#e15759", "#59a14f"};
  std::vector<std::pair<std::string, std::string>> legend;
  for (size_t s = 0; s < series.size(); ++s) {
    c.polyline(series[s].second, colours[s % 3], series[s].first);
    legend.emplace_back(series[s].first, colours[s % 3]);
  }
  c.legend(legend);
  return c.done();
}

// ---- samples and faults ---------------------------------------------------------------

// The spread of `run --samples N`: a histogram of each sampled metric's draws.
std::string samples_section(Db& db, const Run& r) {
  if (!db.has_table("samples")) return "";
  std::vector<std::pair<std::string, std::vector<double>>> by_key;
  db.each("SELECT key, value FROM samples WHERE run_id = ? ORDER BY key, sample", {r.id}, [&](sqlite3_stmt* st) {
    const std::string k = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    if (by_key.empty() || by_key.back().first != k) by_key.emplace_back(k, std::vector<double>{});
    by_key.back().second.push_back(sqlite3_column_double(st, 1));
  });
  if (by_key.empty()) return "";
  // The training step's time, or the serving run's median end-to-end latency, first.
  const char* lead = r.kind == "inference" ? "e2e_s_p50" : "iteration_time_s";
  std::stable_partition(by_key.begin(), by_key.end(), [&](const auto& kv) { return kv.first == lead; });
  std::string out = "<section><h2>Distribution over " + std::to_string(by_key.front().second.size()) + " samples</h2>";
  for (size_t i = 0; i < by_key.size() && i < 3; ++i) {
    std::vector<double> v = by_key[i].second;
    std::sort(v.begin(), v.end());
    const double lo = v.front(), hi = v.back();
    const int bins = std::clamp(static_cast<int>(std::sqrt(static_cast<double>(v.size()))) + 1, 4, 40);
    const double width = hi > lo ? (hi - lo) / bins : 1;
    std::vector<double> count(static_cast<size_t>(bins), 0.0);
    for (double x : v) count[std::min(static_cast<size_t>(bins - 1), static_cast<size_t>((x - lo) / width))] += 1;
    const double top = *std::max_element(count.begin(), count.end());
    Chart c(900, 200, lo, hi > lo ? hi : lo + 1, 0, top * 1.1);
    c.axes(
        by_key[i].first, "draws", [](double x) { return fmt("%.4g", x); }, [](double y) { return fmt("%.0f", y); });
    std::vector<std::pair<double, double>> pts = {{lo, 0}};
    for (int b = 0; b < bins; ++b) {
      pts.emplace_back(lo + b * width, count[static_cast<size_t>(b)]);
      pts.emplace_back(lo + (b + 1) * width, count[static_cast<size_t>(b)]);
    }
    pts.emplace_back(lo + bins * width, 0);
    c.polyline(pts, "#4e79a7", by_key[i].first);
    const auto q = [&](double p) {
      return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5))];
    };
    out += c.done() + "<p class=\"note\">" + esc(by_key[i].first) + ": p5 " + fmt("%.6g", q(0.05)) + ", p50 " +
           fmt("%.6g", q(0.5)) + ", p95 " + fmt("%.6g", q(0.95)) + " over the seeded draws.</p>";
  }
  return out + "</section>";
}

// Goodput over the job's wall clock: useful time so far over time elapsed, from the
// fault timeline (checkpoints, restarts and lost work are not useful).
std::string faults_section(Db& db, const Run& r) {
  if (!db.has_table("faults")) return "";
  struct Span {
    double a, b;
    std::string kind;
  };
  std::vector<Span> spans;
  int failures = 0;
  db.each("SELECT start_s, end_s, kind FROM faults WHERE run_id = ? ORDER BY start_s", {r.id}, [&](sqlite3_stmt* st) {
    const std::string k = reinterpret_cast<const char*>(sqlite3_column_text(st, 2));
    if (k == "failure") {
      ++failures;
      return;
    }
    spans.push_back({sqlite3_column_double(st, 0), sqlite3_column_double(st, 1), k});
  });
  if (spans.empty()) return "";
  // Wasted time is known per span; useful time so far is elapsed minus the waste so far.
  std::vector<std::pair<double, double>> events;  // (time, +1 starts wasting / -1 stops)
  for (const Span& sp : spans) {
    events.emplace_back(sp.a, 1);
    events.emplace_back(sp.b, -1);
  }
  std::sort(events.begin(), events.end());
  std::vector<std::pair<double, double>> pts;
  double waste = 0, last = 0;
  int open = 0;
  for (const auto& [t, d] : events) {
    if (open > 0) waste += t - last;
    last = t;
    open += static_cast<int>(d);
    if (t > 0) pts.emplace_back(t, std::max(0.0, (t - waste) / t));
  }
  std::string out = "<section><h2>Goodput over time</h2>" +
                    series_svg(
                        {{"useful fraction so far", pts}}, "goodput", [](double v) { return fmt("%.0f%%", 100 * v); },
                        1.0, [](double v) { return fmt("%.3g h", v / 3600); }) +
                    "<p class=\"note\">The seeded fault timeline: " + std::to_string(failures) +
                    " failure(s); checkpoints, restarts and work lost to failures are not useful. Expected goodput " +
                    fmt("%.1f%%", 100 * r.metric("goodput")) + ".</p></section>";
  return out;
}

}  // namespace clustersim::html
