// The parts of `clustersim report`'s HTML page (reports/html_report.h): reading a run from
// the database, the SVG charts and formatting they share, and each section of the page
// (training in html_training.cc, serving in html_serving.cc, the rest in html_parts.cc).
#pragma once

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "reports/html_report.h"

namespace clustersim::html {

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
      throw ReportInputError("cannot read " + path_ + ": " + sqlite3_errmsg(db_) + " (is it a clustersim database?)");
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
      throw ReportInputError(path_ + " is damaged or not a SQLite database (SQLite: " + sqlite3_errmsg(db_) + ")");
    sqlite3_bind_text(st, 1, name.c_str(), -1, SQLITE_TRANSIENT);
    const int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
      throw ReportInputError(path_ + " is damaged or not a SQLite database (SQLite: " + sqlite3_errmsg(db_) + ")");
    return rc == SQLITE_ROW;
  }

 private:
  std::string path_;
  sqlite3* db_ = nullptr;
};

std::string text(sqlite3_stmt* st, int col);

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

Run load_run(Db& db, int64_t id);

// ---- writing ---------------------------------------------------------------------------

std::string esc(const std::string& s);
std::string fmt(const char* f, double v);
std::string dur(double s);  // seconds in a readable unit
std::string gib(double b);
const char* kind_colour(const std::string& k);

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

std::string metrics_table(const Run& r);
// Lines over time, one per named series of (t, value) points.
std::string series_svg(const std::vector<std::pair<std::string, std::vector<std::pair<double, double>>>>& series,
                       const std::string& ylabel, const std::function<std::string(double)>& yt, double ymax_floor,
                       const std::function<std::string(double)>& xt = nullptr);

// ---- sections ----------------------------------------------------------------------------

std::string breakdown_svg(const Run& r);
std::string memory_svg(const Run& r, double hbm_hint);
struct Heat {
  std::string svg;
  int links = 0;
};
Heat link_heatmap(Db& db, const Run& r, int bins);
std::string timeline_json(Db& db, const Run& r, const ReportOptions& opt, std::string& note);
std::string comparison(Db& db, const Run& r);
std::string inference_sections(Db& db, const Run& r, int bins);
std::string samples_section(Db& db, const Run& r);
std::string faults_section(Db& db, const Run& r);

}  // namespace clustersim::html
