#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "reports/html_parts.h"
#include "reports/summary.h"

namespace clustersim::html {

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
  // A cluster of several GPU models gives each stage the capacity of its smallest GPU:
  // a mark across each bar then, one line across the chart otherwise.
  std::vector<double> caps;
  for (size_t i = 0; i < stages.size(); ++i) {
    const std::string k = "gpu_memory_stage_" + std::to_string(i) + "_bytes";
    if (!r.has(k)) break;
    caps.push_back(r.metric(k));
  }
  if (caps.size() != stages.size()) caps.clear();
  double top = std::max(hbm_hint, *std::max_element(stages.begin(), stages.end()));
  for (const double cap : caps) top = std::max(top, cap);
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
  if (!caps.empty()) {
    for (size_t i = 0; i < caps.size(); ++i) {
      const double x = c.X(static_cast<double>(i)) - bw / 2 - 3;
      c.raw("<line x1=\"" + fmt("%.1f", x) + "\" x2=\"" + fmt("%.1f", x + bw + 6) + "\" y1=\"" +
            fmt("%.1f", c.Y(caps[i])) + "\" y2=\"" + fmt("%.1f", c.Y(caps[i])) +
            "\" stroke=\"#e15759\" stroke-width=\"2\"><title>stage " + std::to_string(i) + "'s GPUs: " + gib(caps[i]) +
            "</title></line>");
    }
  } else if (hbm_hint > 0) {
    c.raw("<line x1=\"" + fmt("%.1f", Chart::kLeft) + "\" x2=\"" + fmt("%.1f", w - Chart::kRight) + "\" y1=\"" +
          fmt("%.1f", c.Y(hbm_hint)) + "\" y2=\"" + fmt("%.1f", c.Y(hbm_hint)) +
          "\" stroke=\"#e15759\" stroke-dasharray=\"4 3\"><title>GPU memory " + gib(hbm_hint) + "</title></line>");
  }
  std::string parts = "<p class=\"note\">Fullest stage: ";
  for (const char* k : {"weights", "gradients", "optimizer", "activations", "buffers"}) {
    const std::string key = std::string("memory_") + k + "_bytes";
    if (r.has(key)) parts += std::string(k) + " " + gib(r.metric(key)) + " · ";
  }
  parts += "peak " + gib(r.metric("peak_memory_per_gpu_bytes")) + ".</p>";
  return c.done() + parts;
}

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
  // The busiest by utilization (bytes over what the link could carry in the run), as the
  // note says: a slow link's bytes count for more than a fast one's.
  std::stable_sort(busy.begin(), busy.end(), [](const LinkRow* a, const LinkRow* b) {
    const double ua = a->bw > 0 ? a->total / a->bw : 0, ub = b->bw > 0 ? b->total / b->bw : 0;
    return ua > ub;
  });
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

namespace {

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

}  // namespace

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
           std::to_string(used) + " spans; the report keeps whole ranks up to " + std::to_string(opt.max_spans) +
           " spans, and always the first" + (used > opt.max_spans ? ", which alone has more" : "") + ").";
  if ((!opt.ranks.empty() || !opt.stages.empty() || !opt.streams.empty()) && used == 0)
    throw std::invalid_argument("the timeline selection matches no spans of run " + std::to_string(r.id) +
                                ", expected ranks, stages and streams the run has");
  if (keep == 0)
    return "{\"lanes\":[],\"names\":[],\"kinds\":[],\"streams\":[],\"lane_stream\":[],\"spans\":[],\"end\":0}";
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
    db.each(
        "SELECT stream, name, kind, start_ps, end_ps, bytes, flops FROM spans WHERE run_id = ? AND rank = ? "
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
  int64_t other_ops = 0, other_op = 0;  // ops of the real run whose name is not the simulated op's
  db.each("SELECT rank, op_index, end_ps - start_ps, name FROM spans WHERE run_id = ? ORDER BY rank, op_index",
          {real_id}, [&](sqlite3_stmt* st) {
            auto it = sim.find({sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1)});
            if (it == sim.end()) return;
            if (it->second.first != text(st, 3)) {
              ++other_ops;
              return;
            }
            ++other_op;
            const double real = static_cast<double>(sqlite3_column_int64(st, 2)) * 1e-12;
            if (real >= 1e-6 && it->second.second > 0) pairs.push_back({it->second.first, real, it->second.second});
          });
  // Runs of one name but other plans (another layout run under the same name): their ops
  // at one index are other ops, and comparing them would say nothing.
  if (other_ops > 0)
    return "<section><h2>Simulated vs real</h2><p>Run " + std::to_string(sim_id) + " (sim) and run " +
           std::to_string(real_id) + " (real) share a name but not a plan: " + std::to_string(other_ops) + " of " +
           std::to_string(other_ops + other_op) +
           " ops at the same rank and index are other ops, so they are not compared.</p></section>";
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

}  // namespace clustersim::html
