#include "reports/html_report.h"

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "reports/output_file.h"
#include "reports/summary.h"

namespace clustersim {
namespace {

// ---- reading ---------------------------------------------------------------------------

class Db {
 public:
  explicit Db(const std::string& path) : path_(path) {
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
      const std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
      sqlite3_close(db_);
      throw std::runtime_error("cannot open " + path + ": " + msg);
    }
  }
  ~Db() { sqlite3_close(db_); }
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  // Runs `sql` with integer parameters; calls `row` for each result row.
  void each(const std::string& sql, std::vector<int64_t> params, const std::function<void(sqlite3_stmt*)>& row) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr) != SQLITE_OK)
      throw std::runtime_error("cannot read " + path_ + ": " + sqlite3_errmsg(db_) + " (is it a clustersim database?)");
    for (size_t i = 0; i < params.size(); ++i) sqlite3_bind_int64(st, static_cast<int>(i) + 1, params[i]);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) row(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) throw std::runtime_error("cannot read " + path_ + ": " + sqlite3_errmsg(db_));
  }
  // Whether the database has the table; a file SQLite cannot read (damaged, or no
  // database at all) is said to be that, not "not a clustersim database".
  bool has_table(const std::string& name) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", -1, &st, nullptr) !=
        SQLITE_OK)
      throw std::runtime_error(path_ + " is damaged or not a SQLite database (SQLite: " + sqlite3_errmsg(db_) + ")");
    sqlite3_bind_text(st, 1, name.c_str(), -1, SQLITE_TRANSIENT);
    const int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
      throw std::runtime_error(path_ + " is damaged or not a SQLite database (SQLite: " + sqlite3_errmsg(db_) + ")");
    return rc == SQLITE_ROW;
  }

 private:
  std::string path_;
  sqlite3* db_ = nullptr;
};

std::string text(sqlite3_stmt* st, int col) {
  const unsigned char* t = sqlite3_column_text(st, col);
  return t ? reinterpret_cast<const char*>(t) : "";
}

struct Run {
  int64_t id = -1;
  std::string name, source, kind, network_model, yaml;
  std::vector<std::pair<std::string, double>> metrics;
  double metric(const std::string& k, double fallback = 0) const {
    for (const auto& [key, v] : metrics)
      if (key == k) return v;
    return fallback;
  }
  bool has(const std::string& k) const {
    for (const auto& [key, v] : metrics)
      if (key == k) return true;
    return false;
  }
};

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
  if (r.id < 0) throw std::runtime_error("no complete run " + std::to_string(id) + " in the database");
  db.each("SELECT key, value FROM metrics WHERE run_id = ? ORDER BY rowid", {id},
          [&](sqlite3_stmt* st) { r.metrics.emplace_back(text(st, 0), sqlite3_column_double(st, 1)); });
  return r;
}

// ---- writing ---------------------------------------------------------------------------

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

// A plot area with axes: maps data to SVG coordinates and draws ticks.
class Chart {
 public:
  Chart(double w, double h, double x0, double x1, double y0, double y1, bool logx = false, bool logy = false)
      : w_(w),
        h_(h),
        x0_(x0),
        x1_(x1 > x0 ? x1 : x0 + 1),
        y0_(y0),
        y1_(y1 > y0 ? y1 : y0 + 1),
        logx_(logx),
        logy_(logy) {
    svg_ = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt("%.0f", w) + "\" height=\"" + fmt("%.0f", h) +
           "\" viewBox=\"0 0 " + fmt("%.0f", w) + " " + fmt("%.0f", h) + "\">";
  }
  double X(double x) const {
    const double a = logx_ ? std::log10(std::max(x, 1e-300)) : x, lo = logx_ ? std::log10(x0_) : x0_,
                 hi = logx_ ? std::log10(x1_) : x1_;
    return kLeft + (a - lo) / (hi - lo) * (w_ - kLeft - kRight);
  }
  double Y(double y) const {
    const double a = logy_ ? std::log10(std::max(y, 1e-300)) : y, lo = logy_ ? std::log10(y0_) : y0_,
                 hi = logy_ ? std::log10(y1_) : y1_;
    return h_ - kBottom - (a - lo) / (hi - lo) * (h_ - kTop - kBottom);
  }
  void axes(const std::string& xlabel, const std::string& ylabel, const std::function<std::string(double)>& xt,
            const std::function<std::string(double)>& yt) {
    svg_ += "<g class=\"axis\">";
    svg_ += line(kLeft, h_ - kBottom, w_ - kRight, h_ - kBottom) + line(kLeft, kTop, kLeft, h_ - kBottom);
    for (double v : ticks(x0_, x1_, logx_)) {
      if (xt(v).empty()) continue;
      svg_ += line(X(v), h_ - kBottom, X(v), h_ - kBottom + 4);
      svg_ += "<text x=\"" + fmt("%.1f", X(v)) + "\" y=\"" + fmt("%.1f", h_ - kBottom + 16) +
              "\" text-anchor=\"middle\">" + esc(xt(v)) + "</text>";
    }
    for (double v : ticks(y0_, y1_, logy_)) {
      svg_ += line(kLeft - 4, Y(v), kLeft, Y(v));
      svg_ += "<text x=\"" + fmt("%.1f", kLeft - 6) + "\" y=\"" + fmt("%.1f", Y(v) + 4) + "\" text-anchor=\"end\">" +
              esc(yt(v)) + "</text>";
    }
    svg_ += "<text x=\"" + fmt("%.1f", (kLeft + w_ - kRight) / 2) + "\" y=\"" + fmt("%.1f", h_ - 6) +
            "\" text-anchor=\"middle\">" + esc(xlabel) + "</text>";
    svg_ += "<text transform=\"translate(14," + fmt("%.1f", (kTop + h_ - kBottom) / 2) +
            ") rotate(-90)\" text-anchor=\"middle\">" + esc(ylabel) + "</text></g>";
  }
  void polyline(const std::vector<std::pair<double, double>>& pts, const std::string& colour,
                const std::string& title) {
    if (pts.empty()) return;
    svg_ += "<polyline fill=\"none\" stroke=\"" + colour + "\" stroke-width=\"2\" points=\"";
    for (const auto& [x, y] : pts) svg_ += fmt("%.1f", X(x)) + "," + fmt("%.1f", Y(y)) + " ";
    svg_ += "\"><title>" + esc(title) + "</title></polyline>";
  }
  void raw(const std::string& s) { svg_ += s; }
  void legend(const std::vector<std::pair<std::string, std::string>>& items) {
    double y = kTop + 4;
    for (const auto& [label, colour] : items) {
      svg_ += "<rect x=\"" + fmt("%.1f", w_ - kRight - 150) + "\" y=\"" + fmt("%.1f", y) +
              "\" width=\"10\" height=\"10\" fill=\"" + colour + "\"/><text x=\"" + fmt("%.1f", w_ - kRight - 136) +
              "\" y=\"" + fmt("%.1f", y + 9) + "\">" + esc(label) + "</text>";
      y += 15;
    }
  }
  std::string done() { return svg_ + "</svg>"; }

  static constexpr double kLeft = 70, kRight = 20, kTop = 12, kBottom = 40;

 private:
  static std::string line(double a, double b, double c, double d) {
    return "<line x1=\"" + fmt("%.1f", a) + "\" y1=\"" + fmt("%.1f", b) + "\" x2=\"" + fmt("%.1f", c) + "\" y2=\"" +
           fmt("%.1f", d) + "\" stroke=\"#555\"/>";
  }
  static std::vector<double> ticks(double lo, double hi, bool log) {
    std::vector<double> out;
    if (log) {
      for (double p = std::floor(std::log10(lo)); p <= std::ceil(std::log10(hi)); ++p) {
        const double v = std::pow(10.0, p);
        if (v >= lo * 0.999 && v <= hi * 1.001) out.push_back(v);
      }
      return out;
    }
    const double span = hi - lo, raw = span / 5, mag = std::pow(10.0, std::floor(std::log10(raw)));
    const double step = raw / mag < 2 ? 2 * mag : raw / mag < 5 ? 5 * mag : 10 * mag;
    for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push_back(v);
    return out;
  }
  double w_, h_, x0_, x1_, y0_, y1_;
  bool logx_, logy_;
  std::string svg_;
};

std::string metrics_table(const Run& r) {
  std::string out = "<table class=\"metrics\"><tr><th>metric</th><th>value</th></tr>";
  for (const auto& [k, v] : r.metrics) {
    if (k.rfind("memory_stage_", 0) == 0) continue;
    out += "<tr><td>" + esc(k) + "</td><td class=\"num\">" + esc(format_number(v)) + "</td></tr>";
  }
  return out + "</table>";
}

// ---- training ------------------------------------------------------------------------------

std::string breakdown_svg(const Run& r) {
  const double iter = r.metric("iteration_time_s");
  if (iter <= 0 || !r.has("compute_busy_s")) return "<p>No breakdown: the run has no compute_busy_s.</p>";
  std::vector<std::tuple<std::string, double, std::string>> parts = {
      {"compute", r.metric("compute_busy_s"), "#4e79a7"},
      {"exposed TP comm", r.metric("exposed_comm_tp_s"), "#f28e2b"},
      {"exposed DP comm", r.metric("exposed_comm_dp_s"), "#edc948"},
      {"exposed PP comm", r.metric("exposed_comm_pp_s"), "#e15759"},
      {"exposed CP comm", r.metric("exposed_comm_cp_s"), "#ff9da7"},
      {"exposed EP comm", r.metric("exposed_comm_ep_s"), "#9c755f"},
      {"pipeline bubble", r.metric("bubble_s"), "#bab0ac"}};
  double used = 0;
  for (const auto& p : parts) used += std::get<1>(p);
  parts.emplace_back("idle / other", std::max(0.0, iter - used), "#eeeeee");
  const double w = 900, h = 60, scale = (w - 20) / std::max(iter, used);
  std::string bars;
  double x = 10;
  for (const auto& [label, v, colour] : parts) {
    if (v <= 0) continue;
    bars += "<rect x=\"" + fmt("%.2f", x) + "\" y=\"10\" width=\"" + fmt("%.2f", v * scale) +
            "\" height=\"40\" fill=\"" + colour + "\"><title>" + esc(label) + ": " + dur(v) + " (" +
            fmt("%.1f", 100 * v / iter) + "% of the iteration)</title></rect>";
    x += v * scale;
  }
  double lx = 10, ly = h;
  for (const auto& [label, v, colour] : parts) {
    if (v <= 0) continue;
    const std::string t = label + " " + dur(v) + " (" + fmt("%.1f", 100 * v / iter) + "%)";
    if (lx + 7.0 * static_cast<double>(t.size()) > w) {
      lx = 10;
      ly += 18;
    }
    bars += "<rect x=\"" + fmt("%.0f", lx) + "\" y=\"" + fmt("%.0f", ly) + "\" width=\"10\" height=\"10\" fill=\"" +
            colour + "\" stroke=\"#999\"/><text x=\"" + fmt("%.0f", lx + 14) + "\" y=\"" + fmt("%.0f", ly + 9) + "\">" +
            esc(t) + "</text>";
    lx += 7.0 * static_cast<double>(t.size()) + 30;
  }
  const std::string svg =
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"900\" height=\"" + fmt("%.0f", ly + 16) + "\">" + bars;
  return svg + "</svg><p class=\"note\">Iteration " + dur(iter) +
         "; compute and exposed communication are means over the simulated ranks.</p>";
}

std::string memory_svg(const Run& r, double hbm_hint) {
  std::vector<double> stages;
  for (int i = 0;; ++i) {
    const std::string k = "memory_stage_" + std::to_string(i) + "_bytes";
    if (!r.has(k)) break;
    stages.push_back(r.metric(k));
  }
  if (stages.empty() && r.has("peak_memory_per_gpu_bytes")) stages.push_back(r.metric("peak_memory_per_gpu_bytes"));
  if (stages.empty()) return "<p>No memory figures in this run.</p>";
  double top = std::max(hbm_hint, *std::max_element(stages.begin(), stages.end()));
  const double w = std::min(900.0, std::max(380.0, 120 + 40.0 * static_cast<double>(stages.size()))), h = 260;
  Chart c(w, h, -0.5, static_cast<double>(stages.size()) - 0.5, 0, top * 1.05);
  c.axes(
      "pipeline stage", "bytes per GPU", [](double) { return std::string(); },
      [](double v) { return fmt("%.0f GiB", v / (1ull << 30)); });
  const double bw = std::max(4.0, (c.X(1) - c.X(0)) * 0.7);
  const size_t label_every = std::max<size_t>(1, stages.size() / 16);
  for (size_t i = 0; i < stages.size(); ++i) {
    const double x = c.X(static_cast<double>(i)) - bw / 2;
    c.raw("<rect x=\"" + fmt("%.1f", x) + "\" y=\"" + fmt("%.1f", c.Y(stages[i])) + "\" width=\"" + fmt("%.1f", bw) +
          "\" height=\"" + fmt("%.1f", c.Y(0) - c.Y(stages[i])) + "\" fill=\"#76b7b2\"><title>stage " +
          std::to_string(i) + ": " + gib(stages[i]) + "</title></rect>");
    if (i % label_every == 0)
      c.raw("<text x=\"" + fmt("%.1f", c.X(static_cast<double>(i))) + "\" y=\"" + fmt("%.1f", h - Chart::kBottom + 16) +
            "\" text-anchor=\"middle\">" + std::to_string(i) + "</text>");
  }
  if (hbm_hint > 0)
    c.raw("<line x1=\"" + fmt("%.1f", Chart::kLeft) + "\" x2=\"" + fmt("%.1f", w - Chart::kRight) + "\" y1=\"" +
          fmt("%.1f", c.Y(hbm_hint)) + "\" y2=\"" + fmt("%.1f", c.Y(hbm_hint)) +
          "\" stroke=\"#e15759\" stroke-dasharray=\"4 3\"><title>GPU memory " + gib(hbm_hint) + "</title></line>");
  std::string parts = "<p class=\"note\">Fullest stage: ";
  for (const char* k : {"weights", "gradients", "optimizer", "activations", "buffers"}) {
    const std::string key = std::string("memory_") + k + "_bytes";
    if (r.has(key)) parts += std::string(k) + " " + gib(r.metric(key)) + " · ";
  }
  parts += "peak " + gib(r.metric("peak_memory_per_gpu_bytes")) + ".</p>";
  return c.done() + parts;
}

struct Heat {
  std::string svg;
  int links = 0;
};

Heat link_heatmap(Db& db, const Run& r, int bins) {
  struct LinkRow {
    std::string name, kind;
    double bw = 0;
    std::vector<double> bytes;
    double total = 0;
  };
  std::map<int64_t, LinkRow> links;
  db.each("SELECT link_id, src, dst, kind, bandwidth_Bps FROM links WHERE run_id = ?", {r.id}, [&](sqlite3_stmt* st) {
    LinkRow& l = links[sqlite3_column_int64(st, 0)];
    l.name = text(st, 1) + " → " + text(st, 2);
    l.kind = text(st, 3);
    l.bw = sqlite3_column_double(st, 4);
  });
  int64_t t_end = 0;
  db.each("SELECT max(end_ps) FROM link_usage WHERE run_id = ?", {r.id},
          [&](sqlite3_stmt* st) { t_end = sqlite3_column_int64(st, 0); });
  if (links.empty() || t_end <= 0) return {"<p>No link usage recorded in this run.</p>", 0};
  const double bin_ps = static_cast<double>(t_end) / bins;
  for (auto& [id, l] : links) l.bytes.assign(static_cast<size_t>(bins), 0.0);
  db.each("SELECT link_id, start_ps, end_ps, bytes FROM link_usage WHERE run_id = ?", {r.id}, [&](sqlite3_stmt* st) {
    auto it = links.find(sqlite3_column_int64(st, 0));
    if (it == links.end()) return;
    const double a = static_cast<double>(sqlite3_column_int64(st, 1)),
                 b = static_cast<double>(sqlite3_column_int64(st, 2));
    const double bytes = sqlite3_column_double(st, 3);
    it->second.total += bytes;
    if (b <= a) return;
    for (int i = std::max(0, static_cast<int>(a / bin_ps)); i < bins && i * bin_ps < b; ++i) {
      const double lo = std::max(a, i * bin_ps), hi = std::min(b, (i + 1) * bin_ps);
      if (hi > lo) it->second.bytes[static_cast<size_t>(i)] += bytes * (hi - lo) / (b - a);
    }
  });
  std::vector<const LinkRow*> busy;
  for (const auto& [id, l] : links)
    if (l.total > 0) busy.push_back(&l);
  std::stable_sort(busy.begin(), busy.end(), [](const LinkRow* a, const LinkRow* b) { return a->total > b->total; });
  if (busy.size() > 48) busy.resize(48);
  const double row = 12, left = 260, w = 900, h = 30 + row * static_cast<double>(busy.size());
  const double cell = (w - left - 10) / bins;
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"900\" height=\"" + fmt("%.0f", h + 20) + "\">";
  for (size_t j = 0; j < busy.size(); ++j) {
    const LinkRow& l = *busy[j];
    const double y = 10 + row * static_cast<double>(j);
    svg += "<text x=\"" + fmt("%.0f", left - 6) + "\" y=\"" + fmt("%.1f", y + 9) +
           "\" text-anchor=\"end\" class=\"small\">" + esc(l.name) + "</text>";
    for (int i = 0; i < bins; ++i) {
      const double u = std::min(1.0, l.bytes[static_cast<size_t>(i)] / (l.bw * bin_ps * 1e-12));
      if (u <= 0.001) continue;
      const int shade = static_cast<int>(255 - 215 * u);
      svg += "<rect x=\"" + fmt("%.2f", left + cell * i) + "\" y=\"" + fmt("%.1f", y) + "\" width=\"" +
             fmt("%.2f", cell + 0.3) + "\" height=\"" + fmt("%.1f", row - 1) + "\" fill=\"rgb(" +
             std::to_string(shade) + "," + std::to_string(shade) + ",255)\"><title>" + esc(l.name) + " (" + l.kind +
             "), " + dur(i * bin_ps * 1e-12) + ": " + fmt("%.0f", 100 * u) + "% utilized</title></rect>";
    }
  }
  svg += "<text x=\"" + fmt("%.0f", left) + "\" y=\"" + fmt("%.0f", h + 12) + "\" class=\"small\">0</text>";
  svg += "<text x=\"" + fmt("%.0f", w - 10) + "\" y=\"" + fmt("%.0f", h + 12) +
         "\" text-anchor=\"end\" class=\"small\">" + dur(static_cast<double>(t_end) * 1e-12) + "</text></svg>";
  return {svg, static_cast<int>(busy.size())};
}

// The ranks the timeline shows, each with the rank whose spans stand for it (itself, or
// the representative it mirrors): every rank with spans of its own, or the selection.
std::vector<std::pair<int64_t, int64_t>> selected_ranks(Db& db, const Run& r, const ReportOptions& opt) {
  std::map<int64_t, int64_t> mirror;  // rank -> the rank holding its spans
  if (db.has_table("ranks"))
    db.each("SELECT rank, mirror_of FROM ranks WHERE run_id = ?", {r.id},
            [&](sqlite3_stmt* st) { mirror[sqlite3_column_int64(st, 0)] = sqlite3_column_int64(st, 1); });
  std::set<int64_t> with_spans;
  db.each("SELECT DISTINCT rank FROM spans WHERE run_id = ?", {r.id},
          [&](sqlite3_stmt* st) { with_spans.insert(sqlite3_column_int64(st, 0)); });
  auto source = [&](int64_t rank) {
    const auto it = mirror.find(rank);
    return it == mirror.end() ? rank : it->second;
  };
  // Stage of a rank: its position in its pipeline group (stage 0 without one).
  std::map<int64_t, int64_t> stage;
  if (!opt.stages.empty() && db.has_table("groups"))
    db.each("SELECT ranks FROM groups WHERE run_id = ? AND kind = 'pp'", {r.id}, [&](sqlite3_stmt* st) {
      const std::string csv = text(st, 0);
      int64_t i = 0;
      for (size_t a = 0; a < csv.size();) {
        size_t b = csv.find(',', a);
        if (b == std::string::npos) b = csv.size();
        stage[std::strtoll(csv.substr(a, b - a).c_str(), nullptr, 10)] = i++;
        a = b + 1;
      }
    });
  const std::set<int64_t> want_stages(opt.stages.begin(), opt.stages.end());
  auto stage_ok = [&](int64_t rank) {
    if (want_stages.empty()) return true;
    const auto it = stage.find(rank);
    return want_stages.count(it == stage.end() ? 0 : it->second) > 0;
  };
  std::vector<std::pair<int64_t, int64_t>> out;
  if (!opt.ranks.empty()) {
    for (int64_t rank : std::set<int64_t>(opt.ranks.begin(), opt.ranks.end()))
      if (stage_ok(rank) && with_spans.count(source(rank))) out.emplace_back(rank, source(rank));
  } else if (!want_stages.empty()) {
    for (const auto& [rank, from] : mirror)
      if (stage_ok(rank) && with_spans.count(from)) out.emplace_back(rank, from);
  } else {
    for (int64_t rank : with_spans) out.emplace_back(rank, rank);
  }
  return out;
}

// The spans of the selected ranks and streams, whole ranks while the budget lasts, as
// JSON for the timeline script.
std::string timeline_json(Db& db, const Run& r, const ReportOptions& opt, std::string& note) {
  const std::vector<std::pair<int64_t, int64_t>> chosen = selected_ranks(db, r, opt);
  const std::set<std::string> streams(opt.streams.begin(), opt.streams.end());
  std::map<int64_t, int64_t> count;  // spans per source rank, in the selected streams
  db.each("SELECT rank, stream, count(*) FROM spans WHERE run_id = ? GROUP BY rank, stream", {r.id},
          [&](sqlite3_stmt* st) {
            if (streams.empty() || streams.count(text(st, 1)))
              count[sqlite3_column_int64(st, 0)] += sqlite3_column_int64(st, 2);
          });
  int64_t used = 0;
  size_t keep = 0;
  while (keep < chosen.size() && (keep == 0 || used + count[chosen[keep].second] <= opt.max_spans))
    used += count[chosen[keep++].second];
  if (keep < chosen.size())
    note = "Showing " + std::to_string(keep) + " of " + std::to_string(chosen.size()) + " ranks (" +
           std::to_string(used) + " spans; the report keeps at most " + std::to_string(opt.max_spans) + ").";
  if ((!opt.ranks.empty() || !opt.stages.empty() || !opt.streams.empty()) && used == 0)
    throw std::invalid_argument("the timeline selection matches no spans of run " + std::to_string(r.id) +
                                ", expected ranks, stages and streams the run has");
  if (keep == 0) return "{\"lanes\":[],\"names\":[],\"kinds\":[],\"streams\":[],\"lane_stream\":[],\"spans\":[],\"end\":0}";
  std::map<std::pair<int64_t, std::string>, int> lane_of;
  std::vector<std::string> lanes, stream_names;
  std::vector<int> lane_stream;
  std::unordered_map<std::string, int> name_of, kind_of, stream_of;
  std::vector<std::string> names, kinds;
  std::string spans;
  double end_us = 0;
  int64_t t0 = 0;
  db.each("SELECT min(start_ps) FROM spans WHERE run_id = ?", {r.id},
          [&](sqlite3_stmt* st) { t0 = sqlite3_column_int64(st, 0); });
  // Lanes in (rank, first use) order.
  for (size_t c = 0; c < keep; ++c) {
    const int64_t rank = chosen[c].first;
    db.each("SELECT stream, name, kind, start_ps, end_ps, bytes, flops FROM spans WHERE run_id = ? AND rank = ? "
            "ORDER BY start_ps, stream",
            {r.id, chosen[c].second}, [&](sqlite3_stmt* st) {
              const std::string stream = text(st, 0);
              if (!streams.empty() && !streams.count(stream)) return;
              auto [it, fresh] = lane_of.emplace(std::make_pair(rank, stream), static_cast<int>(lanes.size()));
              if (fresh) {
                lanes.push_back("rank " + std::to_string(rank) + " · " + stream);
                auto sn = stream_of.emplace(stream, static_cast<int>(stream_names.size()));
                if (sn.second) stream_names.push_back(stream);
                lane_stream.push_back(sn.first->second);
              }
              const std::string name = text(st, 1), kind = text(st, 2);
              auto n = name_of.emplace(name, static_cast<int>(names.size()));
              if (n.second) names.push_back(name);
              auto k = kind_of.emplace(kind, static_cast<int>(kinds.size()));
              if (k.second) kinds.push_back(kind);
              const double a = static_cast<double>(sqlite3_column_int64(st, 3) - t0) * 1e-6;
              const double b = static_cast<double>(sqlite3_column_int64(st, 4) - t0) * 1e-6;
              end_us = std::max(end_us, b);
              if (!spans.empty()) spans += ',';
              spans += std::to_string(it->second) + "," + fmt("%.4f", a) + "," + fmt("%.4f", b - a) + "," +
                       std::to_string(k.first->second) + "," + std::to_string(n.first->second) + "," +
                       format_number(static_cast<double>(sqlite3_column_int64(st, 5))) + "," +
                       format_number(sqlite3_column_double(st, 6));
            });
  }
  auto list = [](const std::vector<std::string>& v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ",\"" : "\"") + json_escape(v[i]) + "\"";
    return out + "]";
  };
  std::string colours = "[";
  for (size_t i = 0; i < kinds.size(); ++i) colours += std::string(i ? ",\"" : "\"") + kind_colour(kinds[i]) + "\"";
  colours += "]";
  std::string lane_streams = "[";
  for (size_t i = 0; i < lane_stream.size(); ++i) lane_streams += (i ? "," : "") + std::to_string(lane_stream[i]);
  lane_streams += "]";
  return "{\"lanes\":" + list(lanes) + ",\"names\":" + list(names) + ",\"kinds\":" + list(kinds) +
         ",\"streams\":" + list(stream_names) + ",\"lane_stream\":" + lane_streams + ",\"colours\":" + colours +
         ",\"end\":" + fmt("%.4f", end_us) + ",\"spans\":[" + spans + "]}";
}

// Sim vs real: per op (rank, op index) durations of this run and its twin.
std::string comparison(Db& db, const Run& r) {
  int64_t other = -1;
  db.each(
      "SELECT run_id FROM runs WHERE complete = 1 AND run_id != ? AND source != (SELECT source FROM runs WHERE "
      "run_id = ?) AND name = (SELECT name FROM runs WHERE run_id = ?) ORDER BY run_id DESC LIMIT 1",
      {r.id, r.id, r.id}, [&](sqlite3_stmt* st) { other = sqlite3_column_int64(st, 0); });
  if (other < 0) return "";
  const int64_t sim_id = r.source == "sim" ? r.id : other, real_id = r.source == "sim" ? other : r.id;
  std::map<std::pair<int64_t, int64_t>, std::pair<std::string, double>> sim;
  db.each("SELECT rank, op_index, name, end_ps - start_ps FROM spans WHERE run_id = ?", {sim_id},
          [&](sqlite3_stmt* st) {
            sim[{sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1)}] = {
                text(st, 2), static_cast<double>(sqlite3_column_int64(st, 3)) * 1e-12};
          });
  struct Pair {
    std::string name;
    double real, sim;
  };
  std::vector<Pair> pairs;
  db.each("SELECT rank, op_index, end_ps - start_ps FROM spans WHERE run_id = ? ORDER BY rank, op_index", {real_id},
          [&](sqlite3_stmt* st) {
            auto it = sim.find({sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1)});
            const double real = static_cast<double>(sqlite3_column_int64(st, 2)) * 1e-12;
            if (it != sim.end() && real >= 1e-6 && it->second.second > 0)
              pairs.push_back({it->second.first, real, it->second.second});
          });
  if (pairs.empty()) return "";
  double lo = 1e30, hi = 0;
  for (const Pair& p : pairs) {
    lo = std::min({lo, p.real, p.sim});
    hi = std::max({hi, p.real, p.sim});
  }
  lo = std::pow(10.0, std::floor(std::log10(lo)));
  hi = std::pow(10.0, std::ceil(std::log10(hi)));
  Chart c(520, 420, lo, hi, lo, hi, true, true);
  c.axes(
      "real op time", "simulated op time", [](double v) { return dur(v); }, [](double v) { return dur(v); });
  c.raw("<line x1=\"" + fmt("%.1f", c.X(lo)) + "\" y1=\"" + fmt("%.1f", c.Y(lo)) + "\" x2=\"" + fmt("%.1f", c.X(hi)) +
        "\" y2=\"" + fmt("%.1f", c.Y(hi)) + "\" stroke=\"#999\" stroke-dasharray=\"4 3\"/>");
  const size_t step = std::max<size_t>(1, pairs.size() / 4000);
  for (size_t i = 0; i < pairs.size(); i += step) {
    const Pair& p = pairs[i];
    c.raw("<circle cx=\"" + fmt("%.1f", c.X(p.real)) + "\" cy=\"" + fmt("%.1f", c.Y(p.sim)) +
          "\" r=\"2.5\" fill=\"#4e79a7\" fill-opacity=\"0.5\"><title>" + esc(p.name) + ": real " + dur(p.real) +
          ", simulated " + dur(p.sim) + "</title></circle>");
  }
  std::map<std::string, std::vector<double>> by_name;
  std::map<std::string, std::pair<double, double>> totals;
  std::vector<double> abs_err;
  for (const Pair& p : pairs) {
    const double e = (p.sim - p.real) / p.real;
    by_name[p.name].push_back(e);
    totals[p.name].first += p.real;
    totals[p.name].second += p.sim;
    abs_err.push_back(std::fabs(e));
  }
  std::sort(abs_err.begin(), abs_err.end());
  auto q = [&](double f) { return abs_err[std::min(abs_err.size() - 1, static_cast<size_t>(f * abs_err.size()))]; };
  std::vector<std::pair<double, std::string>> order;
  for (auto& [name, errs] : by_name) order.emplace_back(-totals[name].first, name);
  std::sort(order.begin(), order.end());
  std::string table =
      "<table class=\"metrics\"><tr><th>op</th><th>count</th><th>median error</th><th>real total</th><th>simulated "
      "total</th></tr>";
  for (const auto& [neg, name] : order) {
    auto& errs = by_name[name];
    std::sort(errs.begin(), errs.end());
    table += "<tr><td>" + esc(name) + "</td><td class=\"num\">" + std::to_string(errs.size()) +
             "</td><td class=\"num\">" + fmt("%+.1f%%", 100 * errs[errs.size() / 2]) + "</td><td class=\"num\">" +
             dur(totals[name].first) + "</td><td class=\"num\">" + dur(totals[name].second) + "</td></tr>";
  }
  table += "</table>";
  return "<section><h2>Simulated vs real</h2><p>Run " + std::to_string(sim_id) + " (sim) against run " +
         std::to_string(real_id) + " (real): " + std::to_string(pairs.size()) +
         " ops of at least 1 us; median |error| " + fmt("%.2f%%", 100 * q(0.5)) + ", p95 " +
         fmt("%.2f%%", 100 * q(0.95)) + ".</p><div class=\"row\">" + c.done() + "<div>" + table +
         "</div></div></section>";
}

// ---- inference -----------------------------------------------------------------------------

std::string cdf_svg(const std::vector<std::pair<std::string, std::vector<double>>>& series) {
  double lo = 1e30, hi = 0;
  for (const auto& [name, v] : series)
    for (double x : v)
      if (x > 0) {
        lo = std::min(lo, x);
        hi = std::max(hi, x);
      }
  if (hi <= 0) return "<p>No latencies.</p>";
  lo = std::pow(10.0, std::floor(std::log10(lo)));
  hi = std::pow(10.0, std::ceil(std::log10(hi)));
  Chart c(900, 320, lo, hi, 0, 1, true, false);
  c.axes(
      "latency", "fraction of requests", [](double v) { return dur(v); },
      [](double v) { return fmt("%.0f%%", 100 * v); });
  const char* colours[] = {"#4e79a7", "#f28e2b", "#59a14f"};
  std::vector<std::pair<std::string, std::string>> legend;
  for (size_t s = 0; s < series.size(); ++s) {
    std::vector<double> v;
    for (double x : series[s].second)
      if (x > 0) v.push_back(x);
    std::sort(v.begin(), v.end());
    std::vector<std::pair<double, double>> pts;
    const size_t step = std::max<size_t>(1, v.size() / 400);
    for (size_t i = 0; i < v.size(); i += step)
      pts.emplace_back(v[i], static_cast<double>(i + 1) / static_cast<double>(v.size()));
    if (!v.empty()) pts.emplace_back(v.back(), 1.0);
    c.polyline(pts, colours[s % 3], series[s].first);
    legend.emplace_back(series[s].first, colours[s % 3]);
  }
  c.legend(legend);
  return c.done();
}

std::string series_svg(const std::vector<std::pair<std::string, std::vector<std::pair<double, double>>>>& series,
                       const std::string& ylabel, const std::function<std::string(double)>& yt, double ymax_floor,
                       const std::function<std::string(double)>& xt = nullptr) {
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

std::string inference_sections(Db& db, const Run& r, int bins) {
  std::vector<double> ttft, tpot, e2e;
  double t_end = 0;
  std::vector<std::pair<double, double>> first_tokens;  // time, tokens
  db.each("SELECT arrival_s, first_token_s, finish_s, output_tokens FROM requests WHERE run_id = ?", {r.id},
          [&](sqlite3_stmt* st) {
            const double a = sqlite3_column_double(st, 0), f = sqlite3_column_double(st, 1),
                         e = sqlite3_column_double(st, 2);
            const int64_t out = sqlite3_column_int64(st, 3);
            ttft.push_back(f - a);
            if (out > 1) tpot.push_back((e - f) / static_cast<double>(out - 1));
            e2e.push_back(e - a);
            t_end = std::max(t_end, e);
            first_tokens.emplace_back(f, 1.0);
          });
  std::string out = "<section><h2>Latency</h2>" +
                    cdf_svg({{"time to first token", ttft}, {"time per output token", tpot}, {"end to end", e2e}}) +
                    "</section>";
  // Throughput: decode tokens at each iteration's end, plus every request's first token.
  const double bin = t_end > 0 ? t_end / bins : 1;
  std::vector<double> tokens(static_cast<size_t>(bins), 0.0), kv_max(static_cast<size_t>(bins), 0.0),
      kv_sum(static_cast<size_t>(bins), 0.0), kv_n(static_cast<size_t>(bins), 0.0);
  for (const auto& [t, n] : first_tokens)
    tokens[std::min(static_cast<size_t>(bins - 1), static_cast<size_t>(t / bin))] += n;
  db.each("SELECT end_s, decode_tokens, kv_blocks_used, kv_blocks FROM iterations WHERE run_id = ?", {r.id},
          [&](sqlite3_stmt* st) {
            const size_t i =
                std::min(static_cast<size_t>(bins - 1), static_cast<size_t>(sqlite3_column_double(st, 0) / bin));
            tokens[i] += static_cast<double>(sqlite3_column_int64(st, 1));
            const double blocks = static_cast<double>(sqlite3_column_int64(st, 3));
            const double u = blocks > 0 ? static_cast<double>(sqlite3_column_int64(st, 2)) / blocks : 0;
            kv_max[i] = std::max(kv_max[i], u);
            kv_sum[i] += u;
            kv_n[i] += 1;
          });
  std::vector<std::pair<double, double>> thr, kmax, kmean;
  for (int i = 0; i < bins; ++i) {
    const double t = (i + 0.5) * bin;
    thr.emplace_back(t, tokens[static_cast<size_t>(i)] / bin);
    if (kv_n[static_cast<size_t>(i)] > 0) {
      kmax.emplace_back(t, kv_max[static_cast<size_t>(i)]);
      kmean.emplace_back(t, kv_sum[static_cast<size_t>(i)] / kv_n[static_cast<size_t>(i)]);
    }
  }
  out += "<section><h2>Throughput over time</h2>" +
         series_svg(
             {{"output tokens/s", thr}}, "tokens/s", [](double v) { return fmt("%.0f", v); }, 0) +
         "</section>";
  out += "<section><h2>KV-cache utilization</h2>" +
         series_svg(
             {{"busiest replica", kmax}, {"mean over iterations", kmean}}, "blocks in use",
             [](double v) { return fmt("%.0f%%", 100 * v); }, 1.0) +
         "<p class=\"note\">Blocks in use over blocks per replica, at the end of each iteration.</p></section>";
  return out;
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
  std::string out = "<section><h2>Distribution over " + std::to_string(by_key.front().second.size()) +
                    " samples</h2>";
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
    const auto q = [&](double p) { return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5))]; };
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
                    series_svg({{"useful fraction so far", pts}}, "goodput", [](double v) { return fmt("%.0f%%", 100 * v); },
                               1.0, [](double v) { return fmt("%.3g h", v / 3600); }) +
                    "<p class=\"note\">The seeded fault timeline: " + std::to_string(failures) +
                    " failure(s); checkpoints, restarts and work lost to failures are not useful. Expected goodput " +
                    fmt("%.1f%%", 100 * r.metric("goodput")) + ".</p></section>";
  return out;
}

const char* kStyle = R"css(
body { font: 13px/1.4 system-ui, sans-serif; margin: 20px 28px; color: #222; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 15px; margin: 22px 0 8px; }
.sub { color: #666; } .note { color: #666; font-size: 12px; }
table.metrics { border-collapse: collapse; font-size: 12px; }
table.metrics td, table.metrics th { border-bottom: 1px solid #e4e4e4; padding: 2px 10px 2px 0; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.row { display: flex; gap: 24px; align-items: flex-start; flex-wrap: wrap; }
svg text { font: 11px system-ui, sans-serif; fill: #333; } svg .small { font-size: 9px; }
#tl-wrap { border: 1px solid #ccc; max-height: 520px; overflow-y: auto; position: relative; }
#tl-tip { position: fixed; pointer-events: none; background: #fff; border: 1px solid #999; padding: 4px 6px;
          font-size: 12px; display: none; white-space: pre; z-index: 2; }
.legend span { display: inline-block; margin-right: 14px; } .legend i { display: inline-block; width: 10px;
          height: 10px; margin-right: 4px; }
details pre { max-height: 300px; overflow: auto; background: #f6f6f6; padding: 8px; }
)css";

// The timeline: lanes on a canvas; wheel zooms around the cursor, drag pans, double
// click resets; hovering a span shows its name, kind, start, duration, bytes and FLOPs.
const char* kTimelineScript = R"js(
(function () {
  const d = JSON.parse(document.getElementById('tl-data').textContent);
  const wrap = document.getElementById('tl-wrap'), cv = document.getElementById('tl'), tip = document.getElementById('tl-tip');
  if (!d.lanes.length) { wrap.textContent = 'No spans in this run.'; return; }
  const LH = 14, LABEL = 170, AXIS = 18, n = d.spans.length / 7;
  const byLane = d.lanes.map(() => []);
  for (let i = 0; i < n; i++) byLane[d.spans[7 * i]].push(i);
  // Stream checkboxes: the lanes shown are those of the checked streams.
  const shown = d.streams.map(() => true);
  let rows = [];
  const pick = document.getElementById('tl-streams');
  function relayout() { rows = d.lanes.map((_, l) => l).filter(l => shown[d.lane_stream[l]]); }
  d.streams.forEach((s, k) => {
    const lab = document.createElement('label'), box = document.createElement('input');
    box.type = 'checkbox'; box.checked = true;
    box.addEventListener('change', () => { shown[k] = box.checked; relayout(); draw(); });
    lab.appendChild(box); lab.appendChild(document.createTextNode(' ' + s + ' ')); pick.appendChild(lab);
  });
  relayout();
  let t0 = 0, t1 = d.end || 1;
  const W = () => wrap.clientWidth - 2;
  function fmt(us) { return us >= 1e6 ? (us / 1e6).toPrecision(4) + ' s' : us >= 1e3 ? (us / 1e3).toPrecision(4) + ' ms' : us.toPrecision(4) + ' us'; }
  function draw() {
    const w = W(), h = AXIS + LH * rows.length, dpr = window.devicePixelRatio || 1;
    cv.width = w * dpr; cv.height = h * dpr; cv.style.width = w + 'px'; cv.style.height = h + 'px';
    const g = cv.getContext('2d'); g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.fillStyle = '#fff'; g.fillRect(0, 0, w, h);
    const sx = (w - LABEL) / (t1 - t0);
    g.font = '10px system-ui, sans-serif'; g.fillStyle = '#333';
    for (let k = 0; k <= 8; k++) { const t = t0 + (t1 - t0) * k / 8, x = LABEL + (t - t0) * sx;
      if (k < 8) g.fillText(fmt(t), x + 2, 11); g.fillStyle = '#eee'; g.fillRect(x, AXIS, 1, h); g.fillStyle = '#333'; }
    for (let row = 0; row < rows.length; row++) {
      const l = rows[row], y = AXIS + row * LH;
      g.fillStyle = row % 2 ? '#fafafa' : '#fff'; g.fillRect(LABEL, y, w - LABEL, LH);
      g.fillStyle = '#333'; g.fillText(d.lanes[l], 4, y + 10);
      for (const i of byLane[l]) {
        const a = d.spans[7 * i + 1], b = a + d.spans[7 * i + 2];
        if (b < t0 || a > t1) continue;
        const x = LABEL + Math.max(0, a - t0) * sx, x2 = LABEL + Math.min(t1 - t0, b - t0) * sx;
        g.fillStyle = d.colours[d.spans[7 * i + 3]]; g.fillRect(x, y + 2, Math.max(0.5, x2 - x), LH - 4);
      }
    }
  }
  function at(ev) {
    const r = cv.getBoundingClientRect(), x = ev.clientX - r.left, y = ev.clientY - r.top;
    const row = Math.floor((y - AXIS) / LH); if (row < 0 || row >= rows.length || x < LABEL) return -1;
    const l = rows[row];
    const t = t0 + (x - LABEL) * (t1 - t0) / (W() - LABEL), slack = 2 * (t1 - t0) / (W() - LABEL);
    for (const i of byLane[l]) { const a = d.spans[7 * i + 1], b = a + d.spans[7 * i + 2];
      if (t >= a - slack && t <= b + slack) return i; }
    return -1;
  }
  cv.addEventListener('wheel', ev => { ev.preventDefault();
    const r = cv.getBoundingClientRect(), f = (ev.clientX - r.left - LABEL) / (W() - LABEL);
    const tm = t0 + Math.max(0, Math.min(1, f)) * (t1 - t0), z = ev.deltaY > 0 ? 1.25 : 0.8;
    t0 = tm - (tm - t0) * z; t1 = tm + (t1 - tm) * z; draw(); }, {passive: false});
  let drag = null;
  cv.addEventListener('mousedown', ev => { drag = {x: ev.clientX, t0, t1}; });
  window.addEventListener('mouseup', () => { drag = null; });
  cv.addEventListener('mousemove', ev => {
    if (drag) { const dt = (ev.clientX - drag.x) * (drag.t1 - drag.t0) / (W() - LABEL);
      t0 = drag.t0 - dt; t1 = drag.t1 - dt; draw(); return; }
    const i = at(ev);
    if (i < 0) { tip.style.display = 'none'; return; }
    tip.textContent = d.names[d.spans[7 * i + 4]] + ' (' + d.kinds[d.spans[7 * i + 3]] + ')\nstart ' + fmt(d.spans[7 * i + 1]) +
      '\nduration ' + fmt(d.spans[7 * i + 2]) + '\nbytes ' + d.spans[7 * i + 5] + '\nFLOPs ' + d.spans[7 * i + 6];
    tip.style.left = (ev.clientX + 12) + 'px'; tip.style.top = (ev.clientY + 12) + 'px'; tip.style.display = 'block';
  });
  cv.addEventListener('mouseleave', () => { tip.style.display = 'none'; });
  cv.addEventListener('dblclick', () => { t0 = 0; t1 = d.end || 1; draw(); });
  window.addEventListener('resize', draw);
  draw();
})();
)js";

}  // namespace

void write_html_report(const std::string& db_path, const std::string& out_path, const ReportOptions& opt) {
  if (!std::filesystem::exists(db_path)) throw std::runtime_error("cannot open " + db_path + ": no such file");
  Db db(db_path);
  if (!db.has_table("runs")) throw std::runtime_error(db_path + " is not a clustersim database (no runs table)");
  int64_t id = opt.run_id;
  if (id < 0) {
    db.each("SELECT max(run_id) FROM runs WHERE complete = 1", {}, [&](sqlite3_stmt* st) {
      if (sqlite3_column_type(st, 0) != SQLITE_NULL) id = sqlite3_column_int64(st, 0);
    });
    if (id < 0) throw std::runtime_error(db_path + " holds no complete run");
  }
  const Run r = load_run(db, id);
  const bool inference = r.kind == "inference";
  // A serving run's report has no timeline of ranks, stages and streams to pick from.
  if (inference && (!opt.ranks.empty() || !opt.stages.empty() || !opt.streams.empty()))
    throw std::invalid_argument("run " + std::to_string(r.id) +
                                " is a serving run, whose report has no timeline of ranks, stages or streams, "
                                "expected no --ranks, --stages or --streams");
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + esc(r.name) +
                     " — clustersim report</title><style>" + kStyle + "</style></head><body>";
  html += "<h1>" + esc(r.name) + "</h1><p class=\"sub\">run " + std::to_string(r.id) + " · " + esc(r.kind) + " · " +
          esc(r.source) + (r.network_model.empty() ? "" : " · network " + esc(r.network_model)) + " · " + esc(db_path) +
          "</p>";
  html += "<section><h2>Summary</h2>" + metrics_table(r) + "</section>";
  html += samples_section(db, r);
  html += faults_section(db, r);
  if (inference) {
    html += inference_sections(db, r, opt.time_bins);
  } else {
    html += "<section><h2>Where the iteration goes</h2>" + breakdown_svg(r) + "</section>";
    std::string note;
    const std::string data = timeline_json(db, r, opt, note);
    html +=
        "<section><h2>Timeline</h2><p class=\"note\">Wheel to zoom, drag to pan, double-click to reset; hover a "
        "span for its details. " +
        esc(note) + "</p><p class=\"legend\">";
    for (const char* k : {"gemm", "attention", "memory", "collective", "send", "recv"})
      html += std::string("<span><i style=\"background:") + kind_colour(k) + "\"></i>" + k + "</span>";
    html += "</p><p class=\"legend\" id=\"tl-streams\">Streams: </p><div id=\"tl-wrap\"><canvas id=\"tl\"></canvas>"
            "</div><div id=\"tl-tip\"></div>";
    // "</" cannot appear inside a script element; JSON never needs it unescaped.
    std::string safe;
    for (size_t i = 0; i < data.size(); ++i) {
      if (data[i] == '<' && i + 1 < data.size() && data[i + 1] == '/') {
        safe += "<\\/";
        ++i;
      } else {
        safe += data[i];
      }
    }
    html += "<script type=\"application/json\" id=\"tl-data\">" + safe + "</script><script>" + kTimelineScript +
            "</script></section>";
    double hbm = 0;
    for (const auto& [k, v] : r.metrics)
      if (k == "gpu_memory_bytes") hbm = v;
    html += "<section><h2>Memory per GPU</h2>" + memory_svg(r, hbm) + "</section>";
    const Heat heat = link_heatmap(db, r, opt.time_bins);
    html += "<section><h2>Link utilization</h2>" + heat.svg +
            (heat.links > 0 ? "<p class=\"note\">The " + std::to_string(heat.links) +
                                  " busiest links; darker is busier (bytes carried over bandwidth × time).</p>"
                            : "") +
            "</section>";
    html += comparison(db, r);
  }
  html += "<details><summary>Scenario</summary><pre>" + esc(r.yaml) + "</pre></details>";
  html += "<p class=\"note\">Generated by clustersim from " + esc(db_path) + ", run " + std::to_string(r.id) +
          ".</p></body></html>\n";

  write_file_atomically(out_path, html);
}

}  // namespace clustersim
