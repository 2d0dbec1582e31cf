#include "sim/sweep.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "scenarios/error.h"
#include "support/temp_scenario.h"

namespace clustersim {
namespace {

namespace fs = std::filesystem;

// GPT-3 1.3B on one DGX H100: 4 × 5 × 5 = 100 points, some invalid (tp 8 with micro-batch
// counts that do not divide, ...), each a few milliseconds.
const char* kHundred =
    "name: hundred\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 8}\n"
    "training: {global_batch: 32}\n"
    "sweep:\n  parallel.tp: [1, 2, 4, 8]\n  parallel.micro_batch: [1, 2, 4, 3, 8]\n"
    "  training.global_batch: [16, 32, 64, 24, 5]\n";

std::string write_scenario(const std::string& tag, const std::string& text) {
  const std::string path = testing::temp_dir(tag) + "/s.yaml";
  std::ofstream(path) << text;
  return path;
}

int64_t count_rows(const std::string& db, const std::string& where = "1") {
  sqlite3* h = nullptr;
  sqlite3_open(db.c_str(), &h);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(h, ("SELECT count(*) FROM sweep_results WHERE " + where).c_str(), -1, &st, nullptr);
  int64_t n = -1;
  if (sqlite3_step(st) == SQLITE_ROW) n = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(h);
  return n;
}

TEST(Sweep, PointsAreTheCartesianProductLastKeyFastest) {
  const Scenario s = load_scenario(write_scenario("sweep-points", kHundred));
  const auto points = sweep_points(s);
  ASSERT_EQ(points.size(), 100u);
  EXPECT_EQ(points[0].settings, "parallel.tp=1, parallel.micro_batch=1, training.global_batch=16");
  EXPECT_EQ(points[1].settings, "parallel.tp=1, parallel.micro_batch=1, training.global_batch=32");
  EXPECT_EQ(points[5].settings, "parallel.tp=1, parallel.micro_batch=2, training.global_batch=16");
  EXPECT_EQ(points[99].settings, "parallel.tp=8, parallel.micro_batch=8, training.global_batch=5");
  for (size_t i = 0; i < points.size(); ++i) EXPECT_EQ(points[i].index, static_cast<int64_t>(i));
}

// The Must-show: a 100-point sweep on two threads gives exactly the results of one.
TEST(Sweep, TwoThreadsGiveExactlyTheResultsOfOne) {
  const std::string path = write_scenario("sweep-jobs", kHundred);
  SweepOptions one;
  one.progress = false;
  SweepOptions two = one;
  two.jobs = 2;
  const SweepReport a = run_sweep(path, one), b = run_sweep(path, two);
  ASSERT_EQ(a.results.size(), 100u);
  int64_t ok = 0, invalid = 0;
  for (const SweepPointResult& r : a.results) (r.status == "ok" ? ok : invalid) += 1;
  EXPECT_GT(ok, 20);
  EXPECT_GT(invalid, 10) << "the sweep should hold points that cannot run";
  EXPECT_EQ(sweep_json(a), sweep_json(b));
  EXPECT_EQ(sweep_table(a), sweep_table(b));
}

// Invalid points carry their reason, located at the sweep value that made them invalid.
TEST(Sweep, InvalidPointsAreReportedWithTheirReason) {
  const std::string path =
      write_scenario("sweep-invalid",
                     "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 4}\n"
                     "training: {global_batch: 8}\nsweep:\n  parallel.tp: [1, 3]\n");
  SweepOptions o;
  o.progress = false;
  const SweepReport r = run_sweep(path, o);
  ASSERT_EQ(r.results.size(), 2u);
  EXPECT_EQ(r.results[0].status, "ok");
  EXPECT_EQ(r.results[1].status, "invalid");
  EXPECT_NE(r.results[1].reason.find(path + ":6:20: error:"), std::string::npos) << r.results[1].reason;
  const std::string table = sweep_table(r);
  EXPECT_NE(table.find("not run:"), std::string::npos);
  EXPECT_NE(table.find("parallel.tp=3  [invalid]"), std::string::npos) << table;
  EXPECT_NE(sweep_json(r).find("\"status\": \"invalid\", \"reason\": "), std::string::npos);
}

// Points already in the database are not run again; a new value runs only its points; a
// change to the scenario outside the sweep block runs everything again.
TEST(Sweep, ResumesFromTheDatabase) {
  const std::string dir = testing::temp_dir("sweep-resume");
  const std::string db = dir + "/r.sqlite";
  fs::remove(db);
  const std::string head = "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 4}\n";
  const std::string path = dir + "/s.yaml";
  std::ofstream(path) << head << "training: {global_batch: 16}\nsweep:\n  parallel.tp: [1, 2, 4]\n";
  SweepOptions o;
  o.progress = false;
  o.database = db;
  const SweepReport first = run_sweep(path, o);
  EXPECT_EQ(count_rows(db), 3);
  for (const SweepPointResult& r : first.results) EXPECT_FALSE(r.reused);
  const SweepReport again = run_sweep(path, o);
  for (const SweepPointResult& r : again.results) EXPECT_TRUE(r.reused);
  EXPECT_EQ(sweep_json(first), sweep_json(again));  // the same answers, read back
  std::ofstream(path) << head << "training: {global_batch: 16}\nsweep:\n  parallel.tp: [1, 2, 4, 8]\n";
  const SweepReport more = run_sweep(path, o);
  ASSERT_EQ(more.results.size(), 4u);
  EXPECT_TRUE(more.results[2].reused);
  EXPECT_FALSE(more.results[3].reused);
  EXPECT_EQ(count_rows(db), 4);
  std::ofstream(path) << head << "training: {global_batch: 32}\nsweep:\n  parallel.tp: [1, 2, 4, 8]\n";
  const SweepReport changed = run_sweep(path, o);
  for (const SweepPointResult& r : changed.results) EXPECT_FALSE(r.reused);
  EXPECT_EQ(count_rows(db), 8);
  EXPECT_EQ(count_rows(db, "status = 'ok' AND value IS NOT NULL AND json_extract(metrics, '$.mfu') > 0"), 8);
}

// The files a sweep's points read are part of their fingerprint: a topology file edited
// between two sweeps runs its points again (the second had reused the first's rows).
TEST(Sweep, AnEditedTopologyFileRunsThePointsAgain) {
  const std::string dir = testing::temp_dir("sweep-topology");
  const std::string db = dir + "/r.sqlite";
  fs::remove(db);
  std::ofstream(dir + "/t.yaml") << "nodes:\n  - {preset: dgx-h100, count: 1}\n";
  const std::string path = dir + "/s.yaml";
  std::ofstream(path) << "name: t\ncluster: {topology_file: t.yaml}\nmodel: {preset: gpt3-1.3b, layers: 4}\n"
                         "training: {global_batch: 16}\nsweep:\n  parallel.tp: [1, 2]\n";
  SweepOptions o;
  o.progress = false;
  o.database = db;
  const SweepReport first = run_sweep(path, o);
  for (const SweepPointResult& r : run_sweep(path, o).results) EXPECT_TRUE(r.reused);
  std::ofstream(dir + "/t.yaml") << "nodes:\n  - {preset: dgx-a100, count: 1}\n";
  const SweepReport edited = run_sweep(path, o);
  for (const SweepPointResult& r : edited.results) EXPECT_FALSE(r.reused);
  EXPECT_NE(first.fingerprint, edited.fingerprint);
}

// A swept topology file is hashed as the point reads it, beside the scenario that names it,
// not as a same-named file in the working folder; a --set path is the working folder's.
TEST(Sweep, ASweptTopologyFileIsTheOneBesideItsScenario) {
  const std::string dir = testing::temp_dir("sweep-topology-swept");
  fs::create_directories(dir + "/here");
  fs::create_directories(dir + "/sub");
  const std::string db = dir + "/r.sqlite";
  std::ofstream(dir + "/here/t.yaml") << "nodes:\n  - {preset: dgx-h100, count: 1}\n";  // the decoy
  std::ofstream(dir + "/sub/t.yaml") << "nodes:\n  - {preset: dgx-h100, count: 1}\n";
  const std::string path = dir + "/sub/s.yaml";
  std::ofstream(path) << "name: t\ncluster: {topology_file: t.yaml}\nmodel: {preset: gpt3-1.3b, layers: 4}\n"
                         "training: {global_batch: 16}\nsweep:\n  cluster.topology_file: [t.yaml]\n";
  const fs::path before = fs::current_path();
  fs::current_path(dir + "/here");
  SweepOptions o;
  o.progress = false;
  o.database = db;
  const SweepReport first = run_sweep(path, o);
  std::ofstream(dir + "/sub/t.yaml") << "nodes:\n  - {preset: dgx-a100, count: 1}\n";
  const SweepReport edited = run_sweep(path, o);
  for (const SweepPointResult& r : edited.results) EXPECT_FALSE(r.reused);
  EXPECT_NE(first.fingerprint, edited.fingerprint);
  // --set names a path from the working folder, its folders kept.
  fs::current_path(dir);
  EXPECT_EQ(load_scenario(path, {"cluster.topology_file=here/t.yaml"}).cluster.node.gpu.name, "h100-sxm");
  fs::current_path(before);
}

TEST(Sweep, ServingScenariosRankByGoodput) {
  const std::string path = write_scenario(
      "sweep-serving",
      "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b}\ninference:\n  requests: 300\n"
      "  arrivals: {rate_per_s: 20, seed: 1}\n  prompt_tokens: {dist: fixed, value: 512}\n"
      "  output_tokens: {dist: fixed, value: 64}\nsweep:\n  inference.scheduler: [static, vllm, sarathi]\n");
  SweepOptions o;
  o.progress = false;
  const SweepReport r = run_sweep(path, o);
  EXPECT_EQ(r.objective, "goodput_requests_per_s");
  EXPECT_TRUE(r.higher_is_better);
  for (const SweepPointResult& x : r.results) EXPECT_EQ(x.status, "ok") << x.reason;
  o.rank_by = "no_such_metric";
  EXPECT_THROW(run_sweep(path, o), InputError);
}

TEST(Sweep, MetricsJsonRoundTrips) {
  const Metrics m = {{"a", 1.5}, {"b_s", 1e-9}, {"c", 12345678901.0}};
  EXPECT_EQ(parse_metrics_json(metrics_json(m)), m);
}

std::string shell(const std::string& cmd, int& code) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = ::pclose(p);
  code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

// mpirun -n 2 spreads the points over two processes and gathers them into one database
// on rank 0: the same ranking as one process.
TEST(Sweep, MpiRanksGatherIntoOneDatabase) {
  const std::string mpirun =
      "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS=detect_leaks=0 "
      "mpirun --oversubscribe";
  int code = 0;
  shell(mpirun + " -n 1 true", code);
  if (code != 0) GTEST_SKIP() << "mpirun cannot start processes here";
  const std::string dir = testing::temp_dir("sweep-mpi");
  const std::string path = dir + "/s.yaml";
  std::ofstream(path) << "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 4}\n"
                         "training: {global_batch: 16}\nsweep:\n  parallel.tp: [1, 2, 4, 8, 3]\n"
                         "  parallel.micro_batch: [1, 2]\n";
  fs::remove(dir + "/mpi.sqlite");
  const std::string out = shell("(timeout 120 " + mpirun + " -n 2 " + CLUSTERSIM_BINARY + " sweep " + path +
                                    " --mpi --json --out " + dir + "/mpi.sqlite) 2>/dev/null",
                                code);
  if (out.find("sweep --mpi needs MPI") != std::string::npos) GTEST_SKIP() << "built without MPI";
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(count_rows(dir + "/mpi.sqlite"), 10);
  SweepOptions o;
  o.progress = false;
  // (mpirun may forward rank 0's progress lines into its stdout: compare from the JSON on.)
  ASSERT_NE(out.find('{'), std::string::npos) << out;
  EXPECT_EQ(out.substr(out.find('{')), sweep_json(run_sweep(path, o)));
}

}  // namespace
}  // namespace clustersim
