#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "reports/html_report.h"
#include "reports/sqlite_writer.h"
#include "reports/summary.h"
#include "sim/run.h"
#include "sim/serving.h"
#include "support/temp_scenario.h"
#include "topology/gpu.h"

namespace clustersim {
namespace {

namespace fs = std::filesystem;
using testing::scenario_from_text;

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A training run (flow network, so links carry usage) written to `db`.
RunOutcome training_run(const std::string& db) {
  Scenario s = scenario_from_text(
      "name: report-t\ncluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: gpt3-1.3b, layers: 4}\n"
      "parallel: {tp: 2, pp: 2}\ntraining: {global_batch: 16}\nnetwork_model: flow\n",
      "report-train");
  s.output_sqlite = db;
  RunOutcome out = run_training(s);
  write_outputs(out);
  return out;
}

std::string metric_text(const Metrics& m, const std::string& k) {
  for (const auto& [key, v] : m)
    if (key == k) return format_number(v);
  return "?";
}

// A cluster of two GPU models: each stage's bar is marked at its own GPUs' capacity (an
// H200 stage, an H100 stage), not one line at the first node's.
TEST(Report, MixedClusterMarksEachStagesOwnCapacity) {
  const std::string dir = testing::temp_dir("report-mixed");
  {
    std::ofstream(dir + "/mixed.topology.yaml")
        << "nodes:\n  - {preset: dgx-h200, count: 1}\n  - {preset: dgx-h100, count: 1}\nfabric: {topology: fat-tree}\n";
    std::ofstream(dir + "/s.yaml") << "name: mixed\ncluster: {topology_file: mixed.topology.yaml}\n"
                                      "model: {preset: gpt3-1.3b, layers: 4}\nparallel: {tp: 8, pp: 2}\n"
                                      "training: {global_batch: 8}\n";
  }
  Scenario s = load_scenario(dir + "/s.yaml");
  s.output_sqlite = dir + "/m.sqlite";
  const RunOutcome out = run_training(s);
  write_outputs(out);
  const Timeline t = make_timeline(out);
  double cap0 = 0, cap1 = 0;
  for (const auto& [k, v] : t.run.metrics) {
    if (k == "gpu_memory_stage_0_bytes") cap0 = v;
    if (k == "gpu_memory_stage_1_bytes") cap1 = v;
  }
  EXPECT_EQ(cap0, std::round(find_gpu_preset("h200-sxm")->hbm_bytes));
  EXPECT_EQ(cap1, std::round(find_gpu_preset("h100-sxm")->hbm_bytes));
  write_html_report(dir + "/m.sqlite", dir + "/m.html");
  const std::string h = slurp(dir + "/m.html");
  char want[2][64];
  std::snprintf(want[0], sizeof want[0], "stage 0's GPUs: %.2f GiB", cap0 / (1ull << 30));
  std::snprintf(want[1], sizeof want[1], "stage 1's GPUs: %.2f GiB", cap1 / (1ull << 30));
  for (const char* w : want) EXPECT_NE(h.find(w), std::string::npos) << w;
  EXPECT_EQ(h.find("<title>GPU memory "), std::string::npos) << "no single line for a mixed cluster";
}

// The heat map's rows are the busiest links by utilization: ten slow switch links carrying
// as many bytes as fast PCIe links are among them (ranked by bytes, they had been left out).
TEST(Report, TheHeatMapRanksLinksByUtilization) {
  const std::string dir = testing::temp_dir("report-heat");
  {
    std::ofstream t(dir + "/t.topology.yaml");
    t << "nodes:\n  - {count: 2, gpu: v100-sxm2-32gb, gpus: 8, nvswitch: false, pcie_bandwidth: 16GB/s,\n"
         "     gpus_per_pcie_switch: 2, nics: 4, nic_bandwidth: 100Gbps}\nswitches: [ib0]\nlinks:\n";
    for (int n = 0; n < 2; ++n)
      for (int k = 0; k < 4; ++k)
        t << "  - {between: [node" << n << "/nic" << k << ", ib0], bandwidth: 10Gbps}\n";
    std::ofstream(dir + "/s.yaml") << "name: heat\ncluster: {topology_file: t.topology.yaml}\n"
                                      "model: {preset: gpt3-1.3b, layers: 2, dtype: fp16}\nparallel: {dp: 16}\n"
                                      "training: {global_batch: 16}\n";
  }
  Scenario s = load_scenario(dir + "/s.yaml");
  s.output_sqlite = dir + "/h.sqlite";
  write_outputs(run_training(s));
  write_html_report(dir + "/h.sqlite", dir + "/h.html");
  const std::string h = slurp(dir + "/h.html");
  const size_t heat = h.find("<h2>Link utilization</h2>");
  ASSERT_NE(heat, std::string::npos);
  EXPECT_NE(h.find("→ ib0", heat), std::string::npos) << "the slow switch links are the busiest";
}

TEST(Report, TrainingRunHasEverySectionAndTheSummarysNumbers) {
  const std::string dir = testing::temp_dir("report-train-out");
  const std::string db = dir + "/t.sqlite", html = dir + "/t.html";
  fs::remove(db);
  const RunOutcome run = training_run(db);
  write_html_report(db, html);
  const std::string h = slurp(html);
  for (const char* section : {"Where the iteration goes", "Timeline", "Memory per GPU", "Link utilization", "Summary"})
    EXPECT_NE(h.find(section), std::string::npos) << section;
  // The summary's own numbers, as `run --json` prints them.
  for (const char* k : {"iteration_time_s", "mfu", "bubble_fraction", "peak_memory_per_gpu_bytes"})
    EXPECT_NE(h.find("<td>" + std::string(k) + "</td><td class=\"num\">" + metric_text(run.metrics, k) + "</td>"),
              std::string::npos)
        << k;
  // Self-contained: nothing loaded from anywhere.
  EXPECT_EQ(h.find("src=\"http"), std::string::npos);
  EXPECT_EQ(h.find("href=\"http"), std::string::npos);
  EXPECT_EQ(h.find("@import"), std::string::npos);
  // Every span the database holds is in the timeline data: 7 numbers per span (ranks
  // whose spans equal an earlier rank's are its mirrors there).
  const size_t a = h.find("\"spans\":["), b = h.find("]}", a);
  ASSERT_NE(a, std::string::npos);
  const std::string spans = h.substr(a + 9, b - a - 9);
  const size_t numbers = static_cast<size_t>(std::count(spans.begin(), spans.end(), ',')) + 1;
  EXPECT_EQ(numbers, 7 * make_timeline(run).spans.size());
  EXPECT_NE(h.find("<title>compute: "), std::string::npos) << "breakdown tooltips";
  EXPECT_NE(h.find("% utilized</title>"), std::string::npos) << "link heat map cells";
  // The same database gives the same bytes.
  write_html_report(db, dir + "/again.html");
  EXPECT_EQ(slurp(dir + "/again.html"), h);
}

// A real run of the same name beside the simulated one (as `validate` writes): the
// report compares them op by op.
// A run with --samples and faults: the distribution of its draws and its goodput over
// the job's wall clock; a run without them has neither panel.
TEST(Report, SamplesAndFaultsHaveTheirPanels) {
  const std::string dir = testing::temp_dir("report-samples");
  const std::string db = dir + "/s.sqlite", html = dir + "/s.html";
  fs::remove(db);
  Scenario s = scenario_from_text(
      "name: report-s\ncluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: gpt3-1.3b, layers: 4}\n"
      "parallel: {dp: 16}\ntraining: {global_batch: 16, duration: 12h}\n"
      "variability: {gpu_speed: {dist: lognormal, sigma: 0.05}}\n"
      "faults: {gpu_mtbf: 500h, restart: 10min, checkpoint_bandwidth: 1GB/s}\n",
      "report-samples-s");
  s.output_sqlite = db;
  RunOutcome out = run_training(s);
  run_samples(out, 12, 2);
  write_outputs(out);
  write_html_report(db, html);
  const std::string h = slurp(html);
  EXPECT_NE(h.find("Distribution over 12 samples"), std::string::npos);
  EXPECT_NE(h.find("Goodput over time"), std::string::npos);
  EXPECT_NE(h.find("iteration_time_s: p5 "), std::string::npos);
  const std::string plain_db = dir + "/p.sqlite";
  fs::remove(plain_db);
  training_run(plain_db);
  write_html_report(plain_db, dir + "/p.html");
  const std::string p = slurp(dir + "/p.html");
  EXPECT_EQ(p.find("Distribution over"), std::string::npos);
  EXPECT_EQ(p.find("Goodput over time"), std::string::npos);
}

// The timeline's lanes ("rank R · stream") as the report embeds them.
std::vector<std::string> timeline_lanes(const std::string& html) {
  std::vector<std::string> lanes;
  const size_t a = html.find("\"lanes\":["), b = html.find(']', a);
  for (size_t p = html.find('"', a + 9); p != std::string::npos && p < b; p = html.find('"', p + 1)) {
    const size_t q = html.find('"', p + 1);
    lanes.push_back(html.substr(p + 1, q - p - 1));
    p = q;
  }
  return lanes;
}

// TP 2 × PP 2 × DP 4 on 16 GPUs: ranks 0–7 are stage 0, 8–15 stage 1 (placement
// tp-cp-ep-dp-pp), and a mirror rank shows its representative's spans under its own
// number. A selection that matches nothing is refused, and no file is written.
TEST(Report, TimelinePicksRanksStagesAndStreams) {
  const std::string dir = testing::temp_dir("report-pick");
  const std::string db = dir + "/p.sqlite", html = dir + "/p.html";
  fs::remove(db);
  training_run(db);
  auto lanes = [&](const ReportOptions& o) {
    write_html_report(db, html, o);
    return timeline_lanes(slurp(html));
  };
  ReportOptions o;
  o.ranks = {13, 2};
  o.streams = {"compute"};
  EXPECT_EQ(lanes(o), (std::vector<std::string>{"rank 2 · compute", "rank 13 · compute"}));
  o = {};
  o.stages = {1};
  o.streams = {"compute"};
  const std::vector<std::string> stage1 = lanes(o);
  ASSERT_EQ(stage1.size(), 8u);
  for (int r = 8; r < 16; ++r) EXPECT_EQ(stage1[static_cast<size_t>(r - 8)], "rank " + std::to_string(r) + " · compute");
  o = {};
  o.ranks = {0};
  for (const std::string& lane : lanes(o)) EXPECT_EQ(lane.rfind("rank 0 · ", 0), 0u) << lane;
  const std::string before = slurp(html);
  o = {};
  o.stages = {5};
  EXPECT_THROW(write_html_report(db, dir + "/none.html", o), std::invalid_argument);
  EXPECT_FALSE(fs::exists(dir + "/none.html"));
  o = {};
  o.streams = {"no-such-stream"};
  EXPECT_THROW(write_html_report(db, html, o), std::invalid_argument);
  EXPECT_EQ(slurp(html), before);
}

TEST(Report, SimVersusRealWhenTheDatabaseHoldsBoth) {
  const std::string dir = testing::temp_dir("report-compare");
  const std::string db = dir + "/c.sqlite", html = dir + "/c.html";
  fs::remove(db);
  const RunOutcome run = training_run(db);
  Timeline real = make_timeline(run);
  real.run.source = "real";
  real.run.network_model = "real";
  real.links.clear();
  real.link_usage.clear();
  real.borrowed_link_usage = nullptr;
  for (SpanRecord& sp : real.spans) sp.end_ps = sp.start_ps + (sp.end_ps - sp.start_ps) * 5 / 4;  // real is 25% slower
  write_sqlite(real, db);
  write_html_report(db, html);
  const std::string h = slurp(html);
  EXPECT_NE(h.find("Simulated vs real"), std::string::npos);
  EXPECT_NE(h.find("median |error| 20.00%"), std::string::npos);
  EXPECT_NE(h.find("<td class=\"num\">-20.0%</td>"), std::string::npos);
  EXPECT_NE(h.find("<circle"), std::string::npos);
  // A "real" run of the same name but another plan (its ops renamed here) is not compared.
  const std::string other_db = dir + "/o.sqlite";
  fs::remove(other_db);
  const RunOutcome again = training_run(other_db);
  Timeline other = make_timeline(again);
  other.run.source = "real";
  other.links.clear();
  other.link_usage.clear();
  other.borrowed_link_usage = nullptr;
  Plan renamed = *other.plan;
  for (std::string& n : renamed.names) n = "other-" + n;
  other.plan = &renamed;
  write_sqlite(other, other_db);
  const std::string o = render_html_report(other_db);
  EXPECT_NE(o.find("share a name but not a plan"), std::string::npos);
  EXPECT_EQ(o.find("<circle"), std::string::npos);
}

TEST(Report, InferenceRunHasLatencyThroughputAndKv) {
  const std::string dir = testing::temp_dir("report-serve");
  const std::string db = dir + "/i.sqlite", html = dir + "/i.html";
  fs::remove(db);
  Scenario s = scenario_from_text(
      "name: report-i\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b}\ninference:\n"
      "  replicas: 2\n  requests: 400\n  arrivals: {rate_per_s: 30, seed: 2}\n",
      "report-inference");
  s.output_sqlite = db;
  const ServingResult r = run_serving(s, true);
  write_serving_outputs(s, r);
  write_html_report(db, html);
  const std::string h = slurp(html);
  for (const char* section : {"Latency", "time to first token", "Throughput over time", "KV-cache utilization"})
    EXPECT_NE(h.find(section), std::string::npos) << section;
  EXPECT_NE(h.find("<td>ttft_s_p99</td><td class=\"num\">" + metric_text(r.metrics, "ttft_s_p99") + "</td>"),
            std::string::npos);
  EXPECT_EQ(h.find("id=\"tl\""), std::string::npos) << "no training timeline for a serving run";
  ReportOptions spans;  // a budget for a timeline the report does not have: refused, not ignored
  spans.max_spans = 5;
  spans.max_spans_given = true;
  EXPECT_THROW(render_html_report(db, spans), std::invalid_argument);
}

TEST(Report, BadInputWritesNothing) {
  const std::string dir = testing::temp_dir("report-bad");
  fs::remove(dir + "/out.html");
  EXPECT_THROW(write_html_report(dir + "/missing.sqlite", dir + "/out.html"), std::runtime_error);
  std::ofstream(dir + "/junk.sqlite") << "not a database at all";
  EXPECT_THROW(write_html_report(dir + "/junk.sqlite", dir + "/out.html"), std::runtime_error);
  const std::string db = dir + "/t.sqlite";
  fs::remove(db);
  training_run(db);
  ReportOptions o;
  o.run_id = 99;
  EXPECT_THROW(write_html_report(db, dir + "/out.html", o), std::runtime_error);
  EXPECT_FALSE(fs::exists(dir + "/out.html"));
  EXPECT_FALSE(fs::exists(dir + "/out.html.tmp"));
  // Another schema version, and a damaged page: said, not drawn.
  fs::copy_file(db, dir + "/v99.sqlite", fs::copy_options::overwrite_existing);
  {
    sqlite3* h = nullptr;
    ASSERT_EQ(sqlite3_open(std::string(dir + "/v99.sqlite").c_str(), &h), SQLITE_OK);
    sqlite3_exec(h, "PRAGMA user_version = 99", nullptr, nullptr, nullptr);
    sqlite3_close(h);
  }
  try {
    render_html_report(dir + "/v99.sqlite");
    ADD_FAILURE() << "a schema of another version was drawn";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("schema version 99, expected version 2"), std::string::npos) << e.what();
  }
  fs::copy_file(db, dir + "/damaged.sqlite", fs::copy_options::overwrite_existing);
  {
    std::fstream f(dir + "/damaged.sqlite", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(db) / 2));
    const std::string junk(8192, '\x5a');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  EXPECT_THROW(render_html_report(dir + "/damaged.sqlite"), std::runtime_error);
}

// The timeline's data sits in a script element, whose text HTML ends at "</script" and
// re-reads after "<!--": an op's name (an imported trace's is anyone's) carries no '<' into
// it, only \u003c, and the page keeps every section after it.
TEST(Report, OpNamesCannotBreakOutOfTheTimelineData) {
  const std::string dir = testing::temp_dir("report-names");
  const std::string db = dir + "/n.sqlite";
  fs::remove(db);
  training_run(db);
  {
    sqlite3* h = nullptr;
    ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(h, "UPDATE spans SET name = '<!--<script>x</script>' WHERE op_index = 0", nullptr, nullptr,
                           nullptr),
              SQLITE_OK);
    sqlite3_close(h);
  }
  const std::string html = render_html_report(db);
  const std::string open = "<script type=\"application/json\" id=\"tl-data\">";
  const size_t a = html.find(open), b = html.find("</script>", a);
  ASSERT_NE(a, std::string::npos);
  const std::string data = html.substr(a + open.size(), b - a - open.size());
  EXPECT_EQ(data.find('<'), std::string::npos);
  EXPECT_NE(data.find("\\u003c!--\\u003cscript>x\\u003c/script>"), std::string::npos) << data.substr(0, 600);
  EXPECT_NE(html.find("<h2>Memory per GPU</h2>", b), std::string::npos);
}

// Renders the report in headless Chromium and checks the screenshot is not blank.
TEST(Report, RendersInHeadlessChromium) {
  std::string browser;
  for (const char* b : {"chromium", "chromium-browser", "google-chrome"}) {
    const std::string probe = std::string("command -v ") + b + " >/dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) {
      browser = b;
      break;
    }
  }
  if (browser.empty()) GTEST_SKIP() << "no Chromium here (Debian: apt-get install chromium)";
  const std::string dir = testing::temp_dir("report-chromium");
  const std::string db = dir + "/t.sqlite", html = dir + "/t.html", png = dir + "/t.png";
  fs::remove(db);
  fs::remove(png);
  training_run(db);
  write_html_report(db, html);
  const std::string cmd = "timeout 120 " + browser +
                          " --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1200,1600 "
                          "--screenshot=" +
                          png + " file://" + html + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  ASSERT_TRUE(fs::exists(png));
  // A blank 1200×1600 page compresses to a few kilobytes; charts and a timeline do not.
  EXPECT_GT(fs::file_size(png), 30000u);
}

}  // namespace
}  // namespace clustersim
