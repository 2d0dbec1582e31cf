#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "reports/html_parts.h"
#include "reports/summary.h"

namespace clustersim::html {

// ---- inference -----------------------------------------------------------------------------

namespace {

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

}  // namespace

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

}  // namespace clustersim::html
