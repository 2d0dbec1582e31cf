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

#include "reports/html_parts.h"
#include "reports/output_file.h"
#include "reports/sqlite_writer.h"
#include "reports/summary.h"

namespace clustersim {
namespace {

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

std::string render_html_report(const std::string& db_path, const ReportOptions& opt) {
  using namespace html;  // the page's parts (reports/html_parts.h)
  if (!std::filesystem::exists(db_path)) throw std::runtime_error("cannot open " + db_path + ": no such file");
  Db db(db_path);
  if (!db.has_table("runs")) throw ReportInputError(db_path + " is not a clustersim database (no runs table)");
  // Another schema's runs would be read wrong, and a damaged page would be read as whatever
  // it now holds: both said, not drawn.
  int64_t version = -1;
  db.each("PRAGMA user_version", {}, [&](sqlite3_stmt* st) { version = sqlite3_column_int64(st, 0); });
  if (version != kSqliteSchemaVersion)
    throw ReportInputError(db_path + " is a clustersim database of schema version " + std::to_string(version) +
                           ", expected version " + std::to_string(kSqliteSchemaVersion));
  std::string check;
  db.each("PRAGMA quick_check(1)", {}, [&](sqlite3_stmt* st) { check = text(st, 0); });
  if (check != "ok") throw ReportInputError(db_path + " is damaged (SQLite's check: " + check + ")");
  int64_t id = opt.run_id;
  if (id < 0) {
    db.each("SELECT max(run_id) FROM runs WHERE complete = 1", {}, [&](sqlite3_stmt* st) {
      if (sqlite3_column_type(st, 0) != SQLITE_NULL) id = sqlite3_column_int64(st, 0);
    });
    if (id < 0) throw ReportInputError(db_path + " holds no complete run");
  }
  const Run r = load_run(db, id);
  const bool inference = r.kind == "inference";
  // A serving run's report has no timeline of ranks, stages and streams to pick from.
  if (inference && (!opt.ranks.empty() || !opt.stages.empty() || !opt.streams.empty() || opt.max_spans_given))
    throw std::invalid_argument("run " + std::to_string(r.id) +
                                " is a serving run, whose report has no timeline of ranks, stages or streams, "
                                "expected no --ranks, --stages, --streams or --max-spans");
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
    // A script element's text ends at "</script" and changes state at "<!--" (HTML's script
    // data escape states), so no '<' reaches it: JSON has '<' only inside strings, where
    // \u003c stands for it (an op name from an imported trace may hold either).
    std::string safe;
    for (const char c : data) {
      if (c == '<')
        safe += "\\u003c";
      else
        safe += c;
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
  return html;
}

void write_html_report(const std::string& db_path, const std::string& out_path, const ReportOptions& opt) {
  write_file_atomically(out_path, render_html_report(db_path, opt));
}

}  // namespace clustersim
