// End-to-end tests of the clustersim binary: the error catalogue (exit code, the
// FILE:LINE:COL message, nothing written), usage errors, `run` (its traces, its durability under SIGKILL) and `keys`.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <set>
#include <string>
#include <vector>

#include "tests/cli_harness.h"

namespace {

// ---- the error catalogue: `run` -----------------------------------------------------------

TEST_F(CliTest, MalformedYaml) {
  const std::string p = scenario("s.yaml", "cluster: {preset: dgx-h100\nmodel: {preset: gpt3-1.3b}\n");
  expect_input_error(cli("run " + quote(p)), p + ":2:6", "malformed YAML");
}

TEST_F(CliTest, MalformedYamlBadIndentation) {
  const std::string p = scenario("s.yaml", "cluster:\n  preset: dgx-h100\n   nodes: 2\nmodel: {preset: gpt3-1.3b}\n");
  expect_input_error(cli("run " + quote(p)), p + ":3:9", "malformed YAML");
}

TEST_F(CliTest, UnknownKey) {
  const std::string p = scenario("s.yaml",
                                 "cluster:\n"
                                 "  preset: dgx-h100\n"
                                 "  nodez: 1\n"
                                 "model: {preset: gpt3-1.3b}\n");
  expect_input_error(cli("run " + quote(p)), p + ":3:3", "unknown key 'cluster.nodez', did you mean 'nodes'?");
}

TEST_F(CliTest, DuplicateKey) {
  const std::string p = scenario("s.yaml",
                                 "cluster:\n"
                                 "  preset: dgx-h100\n"
                                 "model: {preset: gpt3-1.3b}\n"
                                 "cluster:\n"
                                 "  nodes: 2\n");
  expect_input_error(cli("run " + quote(p)), p + ":4:1", "duplicate key 'cluster'");
}

TEST_F(CliTest, WrongTypeWord) {
  const std::string p = scenario("s.yaml",
                                 "cluster:\n"
                                 "  preset: dgx-h100\n"
                                 "model:\n"
                                 "  preset: gpt3-1.3b\n"
                                 "parallel:\n"
                                 "  tp: four\n");
  expect_input_error(cli("run " + quote(p)), p + ":6:7", "parallel.tp must be an integer, got 'four'");
}

TEST_F(CliTest, WrongTypeList) {
  const std::string p = scenario("s.yaml",
                                 "cluster:\n"
                                 "  preset: dgx-h100\n"
                                 "  nodes: [1]\n"
                                 "model: {preset: gpt3-1.3b}\n");
  expect_input_error(cli("run " + quote(p)), p + ":3:10", "cluster.nodes must be an integer, got a list");
}

TEST_F(CliTest, BadTimeUnit) {
  const std::string p = scenario("s.yaml",
                                 "cluster:\n"
                                 "  preset: dgx-h100\n"
                                 "  scale_out:\n"
                                 "    latency: 2 parsecs\n"
                                 "model: {preset: gpt3-1.3b}\n");
  expect_input_error(cli("run " + quote(p)), p + ":4:14", "unknown time unit in '2 parsecs'");
}

TEST_F(CliTest, BandwidthWithoutUnit) {
  const std::string p = scenario("s.yaml",
                                 "cluster:\n"
                                 "  preset: dgx-h100\n"
                                 "  scale_out:\n"
                                 "    nic_bandwidth: 400\n"
                                 "model: {preset: gpt3-1.3b}\n");
  expect_input_error(cli("run " + quote(p)), p + ":4:20", "bandwidth '400' has no unit");
}

TEST_F(CliTest, ZeroNodes) {
  const std::string p = scenario("s.yaml",
                                 "cluster:\n"
                                 "  preset: dgx-h100\n"
                                 "  nodes: 0\n"
                                 "model: {preset: gpt3-1.3b}\n");
  expect_input_error(cli("run " + quote(p)), p + ":3:10", "cluster.nodes must be positive, got 0");
}

TEST_F(CliTest, NegativeMicroBatch) {
  const std::string p = scenario("s.yaml",
                                 "cluster: {preset: dgx-h100}\n"
                                 "model: {preset: gpt3-1.3b}\n"
                                 "parallel:\n"
                                 "  micro_batch: -1\n");
  expect_input_error(cli("run " + quote(p)), p + ":4:16", "parallel.micro_batch must be positive, got -1");
}

TEST_F(CliTest, LayoutProductNotEqualToGpus) {
  const std::string p = scenario("s.yaml",
                                 "cluster:\n"
                                 "  preset: dgx-h100\n"
                                 "  nodes: 1\n"
                                 "model:\n"
                                 "  preset: gpt3-1.3b\n"
                                 "parallel:\n"
                                 "  tp: 1\n"
                                 "  dp: 4\n");
  expect_input_error(cli("run " + quote(p)), p + ":8:7", "dp·tp·pp·cp = 4·1·1·1 = 4 but the cluster has 8 GPUs");
}

TEST_F(CliTest, LayoutProductNotEqualToGpusViaSet) {
  // The example is valid; --set makes the layout impossible and the error points at the flag.
  const CliResult r = cli("run " + quote(kExample) + " --set " + quote("output.sqlite=" + sqlite_path()) + " --set " +
                          quote("output.trace=" + trace_path()) + " --set parallel.dp=4");
  expect_input_error(r, "--set 'parallel.dp=4':1:13", "but the cluster has 8 GPUs");
}

TEST_F(CliTest, TpNotDividingGpus) {
  const std::string p = scenario("s.yaml",
                                 "cluster: {preset: dgx-h100, nodes: 1}\n"
                                 "model: {preset: gpt3-1.3b}\n"
                                 "parallel:\n"
                                 "  tp: 16\n");
  expect_input_error(cli("run " + quote(p)), p + ":4:7", "does not divide the 8 GPUs");
}

TEST_F(CliTest, TpNotDividingHeads) {
  const std::string p = scenario("s.yaml",
                                 "cluster: {preset: dgx-h100, nodes: 1}\n"
                                 "model:\n"
                                 "  layers: 2\n"
                                 "  hidden: 1536\n"
                                 "  heads: 12\n"
                                 "  ffn_hidden: 6144\n"
                                 "  vocab: 51200\n"
                                 "  seq_len: 2048\n"
                                 "parallel:\n"
                                 "  tp: 8\n");
  expect_input_error(cli("run " + quote(p)), p + ":10:7", "tp = 8 does not divide model.heads = 12");
}

TEST_F(CliTest, TpNotDividingKvHeads) {
  const std::string p = scenario("s.yaml",
                                 "cluster: {preset: dgx-h100, nodes: 1}\n"
                                 "model:\n"
                                 "  preset: gpt3-1.3b\n"
                                 "  kv_heads: 2\n"
                                 "parallel:\n"
                                 "  tp: 4\n");
  expect_input_error(cli("run " + quote(p)), p + ":6:7", "tp = 4 does not divide model.kv_heads = 2");
}

// `plan` and `real` take a training step; a serving scenario is told where it runs, not that
// serving is missing.
TEST_F(CliTest, PlanOfAServingScenarioSaysWhereItRuns) {
  const std::string p = scenario("s.yaml",
                                 "cluster: {preset: dgx-h100, nodes: 1}\n"
                                 "model: {preset: llama3-8b}\n"
                                 "inference:\n"
                                 "  requests: 4\n");
  expect_input_error(cli("plan " + quote(p)), p + ":4:3", "`clustersim run` simulates it");
}

TEST_F(CliTest, LayoutDoesNotFitInMemory) {
  const std::string p = scenario("s.yaml",
                                 "cluster:\n"
                                 "  preset: dgx-a100\n"
                                 "  nodes: 1\n"
                                 "model:\n"
                                 "  preset: gpt3-175b\n"
                                 "parallel:\n"
                                 "  tp: 1\n");
  // Reported at the parallel block (its first key).
  expect_input_error(cli("run " + quote(p)), p + ":7:3", "layout does not fit in memory");
}

TEST_F(CliTest, LayoutErrorInIncludedFileNamesThatFile) {
  write("common/layout.yaml",
        "parallel:\n"
        "  tp: 1\n"
        "  dp: 3\n");
  const std::string p = scenario("s.yaml",
                                 "include: [common/layout.yaml]\n"
                                 "cluster: {preset: dgx-h100}\n"
                                 "model: {preset: gpt3-1.3b}\n");
  expect_input_error(cli("run " + quote(p)), (dir_ / "common" / "layout.yaml").string() + ":3:7",
                     "dp·tp·pp·cp = 3·1·1·1 = 3 but the cluster has 8 GPUs");
}

TEST_F(CliTest, MissingInclude) {
  const std::string p = scenario("s.yaml",
                                 "include:\n"
                                 "  - common/nope.yaml\n"
                                 "cluster: {preset: dgx-h100}\n"
                                 "model: {preset: gpt3-1.3b}\n");
  expect_input_error(cli("run " + quote(p)), p + ":2:5", "included file 'common/nope.yaml' does not exist");
}

TEST_F(CliTest, IncludeCycle) {
  write("b.yaml", "model: {preset: gpt3-1.3b}\ninclude: [s.yaml]\n");
  const std::string p = scenario("s.yaml", "include: [b.yaml]\ncluster: {preset: dgx-h100}\n");
  expect_input_error(cli("run " + quote(p)), (dir_ / "b.yaml").string() + ":2:11", "include cycle");
}

TEST_F(CliTest, UnknownClusterPreset) {
  const std::string p = scenario("s.yaml",
                                 "cluster:\n"
                                 "  preset: dgx-z100\n"
                                 "model: {preset: gpt3-1.3b}\n");
  expect_input_error(cli("run " + quote(p)), p + ":2:11", "unknown cluster.preset 'dgx-z100', expected one of:");
}

TEST_F(CliTest, UnknownModelPreset) {
  const std::string p = scenario("s.yaml",
                                 "cluster: {preset: dgx-h100}\n"
                                 "model:\n"
                                 "  preset: gpt-9\n");
  expect_input_error(cli("run " + quote(p)), p + ":3:11", "unknown model.preset 'gpt-9', expected one of:");
}

TEST_F(CliTest, OutputUnderARegularFile) {
  const fs::path blocker = dir_ / "blocker";
  write("blocker", "not a directory\n");
  const std::string p = write("s.yaml",
                              "cluster: {preset: dgx-h100}\n"
                              "model: {preset: gpt3-1.3b}\n"
                              "output:\n"
                              "  trace: " +
                                  trace_path() +
                                  "\n"
                                  "  sqlite: " +
                                  (blocker / "run.sqlite").string() + "\n");
  expect_input_error(cli("run " + quote(p)), p + ":5:11", "is not a directory");
  EXPECT_TRUE(fs::is_regular_file(blocker));
  EXPECT_EQ(read_file(blocker), "not a directory\n");
}

TEST_F(CliTest, OutputUnderARegularFileViaSet) {
  write("blocker", "x");
  const std::string bad = (dir_ / "blocker" / "deeper" / "t.json").string();
  const CliResult r = cli("run " + quote(kExample) + " --set " + quote("output.sqlite=" + sqlite_path()) + " --set " +
                          quote("output.trace=" + bad));
  expect_input_error(r, "--set 'output.trace=" + bad + "':1:14", "is not a directory");
  EXPECT_FALSE(fs::exists(dir_ / "blocker" / "deeper"));
}

TEST_F(CliTest, OutputIsADirectory) {
  fs::create_directories(dir_ / "adir");
  const std::string p = write("s.yaml",
                              "cluster: {preset: dgx-h100}\n"
                              "model: {preset: gpt3-1.3b}\n"
                              "output:\n"
                              "  sqlite: " +
                                  (dir_ / "adir").string() +
                                  "\n"
                                  "  trace: " +
                                  trace_path() + "\n");
  expect_input_error(cli("run " + quote(p)), p + ":4:11", "is a directory");
  EXPECT_TRUE(fs::is_empty(dir_ / "adir"));
}

TEST_F(CliTest, MissingScenarioFile) {
  const std::string p = (dir_ / "no-such.yaml").string();
  const CliResult r = cli("run " + quote(p));
  EXPECT_EQ(r.code, 1) << r;
  EXPECT_TRUE(starts_with(r.err, p + ": error: cannot read scenario file")) << r;
  EXPECT_TRUE(r.out.empty()) << r;
}

TEST_F(CliTest, SetOfUnknownKey) {
  const CliResult r =
      cli("run " + quote(kExample) + " --set " + quote("output.sqlite=" + sqlite_path()) + " --set parallel.tpp=4");
  expect_input_error(r, "--set 'parallel.tpp=4':1:1", "unknown key 'parallel.tpp', did you mean 'tp'?");
}

// ---- usage errors: exit 2 ----------------------------------------------------------------

TEST_F(CliTest, NoArgumentsIsUsage) {
  const CliResult r = cli("");
  EXPECT_EQ(r.code, 2) << r;
  EXPECT_NE(r.err.find("usage: clustersim"), std::string::npos) << r;
}

TEST_F(CliTest, UnknownCommandIsUsage) { expect_usage_error(cli("frobnicate"), "unknown command 'frobnicate'"); }

TEST_F(CliTest, UnknownRunOptionIsUsage) {
  expect_usage_error(cli("run " + quote(kExample) + " --set " + quote("output.sqlite=" + sqlite_path()) + " --turbo"),
                     "unknown option '--turbo' for run");
}

TEST_F(CliTest, RunWithoutScenarioIsUsage) { expect_usage_error(cli("run"), "run needs a scenario file"); }

TEST_F(CliTest, RunWithTwoScenariosIsUsage) {
  expect_usage_error(cli("run " + quote(kExample) + " " + quote(kExample)), "run takes one scenario file");
}

TEST_F(CliTest, SetWithoutValueIsUsage) {
  expect_usage_error(cli("run " + quote(kExample) + " --set"), "--set needs a value");
  // A flag where the value goes is no value: `plan --out --json` had written a file named --json.
  expect_usage_error(cli("plan " + quote(kExample) + " --out --json"), "--out needs a value, got the flag --json");
  EXPECT_FALSE(fs::exists(dir_ / "--json"));
}

// A flag that takes one value, given twice, is a usage error in every command: the last one
// had been kept without a word (`--samples 2 --samples 3`, `-j 2 --jobs 3`, `--out a --out b`).
TEST_F(CliTest, AFlagOfOneValueGivenTwiceIsUsage) {
  const std::string s = quote(kExample);
  for (const std::string& line :
       {"run " + s + " --samples 2 --samples 3", "sweep " + s + " -j 2 --jobs 3", "plan " + s + " --out a --out b",
        "search " + s + " --top 2 --top 3", "export-chakra " + s + " --out a --out b",
        std::string("collective --op all-reduce --op all-gather --gpus 8 --cluster dgx-h100"),
        std::string("accuracy . --jobs 1 --jobs 2"), std::string("report x.sqlite --html a --html b"),
        std::string("calibrate --out a --out b")}) {
    const CliResult r = cli(line);
    EXPECT_EQ(r.code, 2) << line << ": " << r;
    EXPECT_NE(r.err.find("given twice, expected it once"), std::string::npos) << line << ": " << r;
  }
}

TEST_F(CliTest, UnknownCollectiveOptionIsUsage) {
  expect_usage_error(cli("collective --op all-reduce --gpus 8 --cluster dgx-h100 --bogus"),
                     "unknown option '--bogus' for collective");
}

TEST_F(CliTest, CollectiveWithoutGpusIsUsage) {
  expect_usage_error(cli("collective --op all-reduce --cluster dgx-h100"), "collective needs --gpus N");
}

TEST_F(CliTest, CollectiveWithoutClusterIsUsage) {
  expect_usage_error(cli("collective --op all-reduce --gpus 8"), "collective needs --cluster PRESET");
}

TEST_F(CliTest, TimingOtherThanOpsOrStreamIsUsage) {
  for (const char* cmd : {"real ", "validate "})
    expect_usage_error(cli(cmd + quote(kExample) + " --timing kernels"),
                       "--timing expects ops (an event pair around every op) or stream (none between ops), got "
                       "'kernels'");
}

TEST_F(CliTest, HelpAndVersion) {
  CliResult r = cli("--help");
  EXPECT_EQ(r.code, 0) << r;
  EXPECT_NE(r.out.find("usage: clustersim"), std::string::npos) << r;
  r = cli("--version");
  EXPECT_EQ(r.code, 0) << r;
  EXPECT_TRUE(starts_with(r.out, "clustersim ")) << r;
  // A command's own --help is the usage, on stdout, exit 0, whatever else is on the line.
  for (const char* line : {"run --help", "accuracy -h", "search S.yaml --help", "collective --help"}) {
    r = cli(line);
    EXPECT_EQ(r.code, 0) << line << "\n" << r;
    EXPECT_NE(r.out.find("usage: clustersim"), std::string::npos) << line << "\n" << r;
    EXPECT_TRUE(r.err.empty()) << line << "\n" << r;
  }
  EXPECT_EQ(cli("nosuchcommand --help").code, 2);
}

// search's database rows: each simulated candidate with the --set pairs that run it again.
class SearchCliTest : public CliTest {
 protected:
  // (settings, simulated time) of every row, point 0 first; each row's point, status and
  // objective checked on the way.
  std::vector<std::pair<std::string, double>> rows_of(const fs::path& db_path, const std::string& sweep) {
    sqlite3* db = nullptr;
    std::vector<std::pair<std::string, double>> rows;
    if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
      ADD_FAILURE() << "cannot open " << db_path;
      sqlite3_close(db);
      return rows;
    }
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db,
                                 "SELECT point, settings, status, objective, value, sweep FROM sweep_results "
                                 "ORDER BY point",
                                 -1, &st, nullptr),
              SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
      EXPECT_EQ(sqlite3_column_int64(st, 0), static_cast<int64_t>(rows.size()));
      EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 2)), "ok");
      EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 3)), "iteration_time_s");
      EXPECT_EQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 5)), "search " + sweep);
      rows.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(st, 1)), sqlite3_column_double(st, 4));
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rows;
  }
  // search on `file` with `args`, its rows written to NAME.sqlite (NAME the file's stem), and
  // at least `least` of them read back.
  std::vector<std::pair<std::string, double>> searched(const std::string& file, const std::string& args, size_t least) {
    const std::string name = fs::path(file).stem().string();
    const CliResult r = cli("search " + quote(file) + " " + args + " --out " + name + ".sqlite", 300);
    EXPECT_EQ(r.code, 0) << r;
    const auto rows = rows_of(dir_ / (name + ".sqlite"), name);
    EXPECT_GE(rows.size(), least) << r;
    return rows;
  }
  // Each row's settings, as --set pairs on the scenario `file`, run to the row's own time.
  void expect_rows_rerun(const std::string& file, const std::vector<std::pair<std::string, double>>& rows) {
    for (const auto& [settings, seconds] : rows) {
      std::string sets;
      for (size_t at = 0; at <= settings.size();) {
        const size_t comma = settings.find(", ", at);
        sets += " --set " + quote(settings.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
        at = comma == std::string::npos ? settings.size() + 1 : comma + 2;
      }
      const CliResult again = cli("run " + quote(file) + sets + " --json", 60);
      ASSERT_EQ(again.code, 0) << settings << "\n" << again;
      const size_t at = again.out.find("\"iteration_time_s\": ");
      ASSERT_NE(at, std::string::npos) << again;
      EXPECT_NEAR(std::stod(again.out.substr(at + 20)), seconds, 1e-9 * seconds) << settings;
    }
  }
};

// search writes its simulated candidates to output.sqlite (or --out), fastest first, each with
// the --set pairs that run it again: run with those pairs gives the candidate's own time. A
// trace, which search does not write, is said to be missing rather than silently absent.
TEST_F(SearchCliTest, WritesItsCandidatesWithTheSettingsThatRunThem) {
  const std::string body =
      "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 4}\n"
      "training: {global_batch: 16}\n";
  const std::string s = write("s.yaml", body + "output: {sqlite: out/search.sqlite}\n");
  const CliResult r = cli("search " + quote(s) + " --top 3 --json", 120);
  ASSERT_EQ(r.code, 0) << r;
  const auto rows = rows_of(dir_ / "out" / "search.sqlite", "s");
  ASSERT_GE(rows.size(), 3u);
  for (size_t i = 1; i < rows.size(); ++i) EXPECT_LE(rows[i - 1].second, rows[i].second) << "fastest first";
  expect_rows_rerun(write("plain.yaml", body), rows);
  EXPECT_NE(r.out.find("\"settings\": \"" + rows[0].first + "\""), std::string::npos) << r;
  // A rerun into the same database (another --top, another network model) replaces the
  // scenario's ranking whole: no earlier row is left beside it under a point number of its own.
  const CliResult again = cli("search " + quote(s) + " --top 1 --refine analytic", 120);
  ASSERT_EQ(again.code, 0) << again;
  EXPECT_LE(rows_of(dir_ / "out" / "search.sqlite", "s").size(), 2u);  // the best, and the scenario's own layout
  // A trace, which search does not write, is said to be missing; an empty --out is refused.
  const CliResult traced =
      cli("search " + quote(write("t.yaml", body + "output: {trace: t.json}\n")) + " --top 1 --refine analytic", 60);
  EXPECT_EQ(traced.code, 0) << traced;
  EXPECT_NE(traced.err.find("t.yaml:4:17: warning: search writes no trace"), std::string::npos) << traced;
  EXPECT_FALSE(fs::exists(dir_ / "t.json"));
  EXPECT_EQ(cli("search " + quote(s) + " --out ''", 20).code, 1);
}

// What search changes beside the layout is in the settings too: the end stages' sizes and the
// micro-batch group the scenario's own pipeline had (null: back to the default), the experts'
// TP degree of a mixture of experts, and the network model the candidates ran on.
TEST_F(SearchCliTest, SettingsCarryWhatSearchChangedBesideTheLayout) {
  const std::string uneven = write("u.yaml",
                                   "cluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: llama3-8b, layers: 30}\n"
                                   "parallel: {tp: 2, pp: 4, schedule: interleaved-1f1b, virtual_stages: 2, "
                                   "microbatch_group: 8, first_stage_layers: 6}\ntraining: {global_batch: 64}\n");
  const auto rows = searched(uneven, "--top 4 --refine flow", 4);
  ASSERT_FALSE(rows.empty());
  EXPECT_NE(rows[0].first.find("network_model=flow"), std::string::npos) << rows[0].first;
  expect_rows_rerun(uneven, rows);
  const std::string moe = write("m.yaml",
                                "cluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: mixtral-8x7b, layers: 4}\n"
                                "parallel: {tp: 2, ep: 4, expert_tp: 1, sequence_parallel: true, zero_stage: 1}\n"
                                "training: {global_batch: 32}\n");
  const auto moe_rows = searched(moe, "--top 4", 4);
  for (const auto& [settings, seconds] : moe_rows)
    EXPECT_NE(settings.find("parallel.expert_tp="), std::string::npos) << settings;
  expect_rows_rerun(moe, moe_rows);
}

// Keys the scenario wrote for its own layout that a candidate's layout does not take (the
// modules of a selective recompute, ZeRO 3's prefetch) are null in the candidate's settings,
// so its row reruns; and the scenario's own row is its own layout, micro-batch group and all.
TEST_F(SearchCliTest, KeysACandidateDoesNotTakeAreNull) {
  const std::string base = "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 4}\n";
  const std::string sel = write("sel.yaml", base +
                                                "training: {global_batch: 16, recompute: selective, "
                                                "recompute_modules: [core_attn]}\n");
  const auto sel_rows = searched(sel, "--top 3", 3);
  ASSERT_FALSE(sel_rows.empty());
  EXPECT_NE(sel_rows[0].first.find("training.recompute_modules=null"), std::string::npos) << sel_rows[0].first;
  expect_rows_rerun(sel, sel_rows);
  const std::string zp = write("zp.yaml", base +
                                              "parallel: {zero_stage: 3, zero3_backward_prefetch: post}\n"
                                              "training: {global_batch: 16}\n");
  expect_rows_rerun(zp, searched(zp, "--top 8", 1));
  const std::string mg = write("mg.yaml", base +
                                              "parallel: {dp: 4, pp: 2, schedule: interleaved-1f1b, virtual_stages: 2, "
                                              "microbatch_group: 8}\ntraining: {global_batch: 64}\n");
  const CliResult ms = cli("search " + quote(mg) + " --top 3 --json", 120);
  ASSERT_EQ(ms.code, 0) << ms;
  const size_t b = ms.out.find("\"baseline\": {");
  ASSERT_NE(b, std::string::npos) << ms;
  const CliResult own = cli("run " + quote(mg) + " --json");
  ASSERT_EQ(own.code, 0) << own;
  EXPECT_NEAR(json_field(ms.out.substr(b), "iteration_time_s"), json_field(own.out, "iteration_time_s"), 1e-9)
      << "the scenario's row is its own layout";
  // search's own --set pairs are part of every row: the row alone reruns the candidate.
  const std::string plain = write("p.yaml", base + "training: {global_batch: 16}\n");
  const auto set_rows = searched(plain, "--top 2 --set model.seq_len=1024", 2);
  ASSERT_FALSE(set_rows.empty());
  EXPECT_EQ(set_rows[0].first.rfind("model.seq_len=1024, ", 0), 0u) << set_rows[0].first;
  expect_rows_rerun(plain, set_rows);
  // A pair whose value holds ", " would read back from a row as two: refused.
  const CliResult comma = cli("search " + quote(plain) + " --top 1 --set " + quote("name=my run, v2"));
  EXPECT_EQ(comma.code, 1) << comma;
  EXPECT_NE(comma.err.find("holds ', '"), std::string::npos) << comma;
}

// ---- run: positive -------------------------------------------------------------------------

// The spans table, one line per row, through the sqlite3 C API.
std::string dump_spans(const std::string& db_path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << "cannot open " << db_path;
    sqlite3_close(db);
    return "";
  }
  sqlite3_stmt* st = nullptr;
  const char* q = "SELECT rank,stream,op_index,name,kind,start_ps,end_ps,bytes,flops FROM spans ORDER BY rowid";
  if (sqlite3_prepare_v2(db, q, -1, &st, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << "cannot query spans in " << db_path << ": " << sqlite3_errmsg(db);
    sqlite3_close(db);
    return "";
  }
  std::string out;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    for (int c = 0; c < sqlite3_column_count(st); ++c) {
      const unsigned char* t = sqlite3_column_text(st, c);
      out += (c ? "|" : "") + std::string(t ? reinterpret_cast<const char*>(t) : "NULL");
    }
    out += "\n";
  }
  EXPECT_EQ(rc, SQLITE_DONE) << sqlite3_errmsg(db);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return out;
}

TEST_F(CliTest, RunExampleJson) {
  const std::string db = (dir_ / "a.sqlite").string(), trace = (dir_ / "a.trace.json").string();
  const CliResult r = cli("run " + quote(kExample) + " --set " + quote("output.sqlite=" + db) + " --set " +
                          quote("output.trace=" + trace) + " --json");
  ASSERT_EQ(r.code, 0) << r;
  // One JSON object on one line.
  ASSERT_FALSE(r.out.empty()) << r;
  EXPECT_EQ(r.out.back(), '\n') << r;
  const std::string line = r.out.substr(0, r.out.size() - 1);
  EXPECT_EQ(line.find('\n'), std::string::npos) << r;
  EXPECT_EQ(line.front(), '{') << r;
  EXPECT_EQ(line.back(), '}') << r;
  for (const char* key : {"iteration_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "bubble_fraction",
                          "exposed_comm_s", "peak_memory_per_gpu_bytes"})
    EXPECT_NE(line.find("\"" + std::string(key) + "\": "), std::string::npos) << key << "\n" << r;
  EXPECT_TRUE(fs::is_regular_file(db));
  EXPECT_TRUE(fs::is_regular_file(trace));
  EXPECT_GT(fs::file_size(db), 0u);
  EXPECT_GT(fs::file_size(trace), 0u);
  EXPECT_FALSE(dump_spans(db).empty());
  const std::string t = read_file(trace);
  EXPECT_NE(t.find("traceEvents"), std::string::npos);
  // The example's own relative out/ paths were overridden: nothing lands in the working directory.
  EXPECT_FALSE(fs::exists(dir_ / "out"));
}

TEST_F(CliTest, RunExampleTable) {
  const CliResult r = cli("run " + quote(kExample) + " --set " + quote("output.sqlite=" + sqlite_path()) +
                          " --set=" + quote("output.trace=" + trace_path()));
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_NE(r.out.find("iteration"), std::string::npos) << r;
  EXPECT_NE(r.out.find("gpt3-1.3b"), std::string::npos) << r;
  EXPECT_TRUE(fs::is_regular_file(sqlite_path()));
  EXPECT_TRUE(fs::is_regular_file(trace_path()));  // --set=key=value works like --set key=value
}

TEST_F(CliTest, RunIsDeterministic) {
  auto run_into = [&](const std::string& tag) {
    const std::string db = (dir_ / (tag + ".sqlite")).string(), trace = (dir_ / (tag + ".trace.json")).string();
    const CliResult r = cli("run " + quote(kExample) + " --set " + quote("output.sqlite=" + db) + " --set " +
                            quote("output.trace=" + trace) + " --json");
    EXPECT_EQ(r.code, 0) << r;
    return std::pair{db, trace};
  };
  const auto [db1, trace1] = run_into("first");
  const auto [db2, trace2] = run_into("second");
  const std::string spans1 = dump_spans(db1), spans2 = dump_spans(db2);
  EXPECT_FALSE(spans1.empty());
  EXPECT_TRUE(spans1 == spans2) << "spans tables differ between two identical runs";
  const std::string t1 = read_file(trace1), t2 = read_file(trace2);
  EXPECT_FALSE(t1.empty());
  EXPECT_TRUE(t1 == t2) << "trace files differ between two identical runs";
}

TEST_F(CliTest, RunSmallCustomScenario) {
  const std::string p = scenario("s.yaml",
                                 "name: tiny\n"
                                 "cluster: {preset: dgx-h100, nodes: 1}\n"
                                 "model:\n"
                                 "  preset: gpt3-1.3b\n"
                                 "  layers: 2\n"
                                 "parallel: {tp: 2, micro_batch: 1}\n");
  const CliResult r = cli("run " + quote(p) + " --json");
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_NE(r.out.find("\"name\": \"tiny\""), std::string::npos) << r;
  EXPECT_NE(r.out.find("\"tp\": 2"), std::string::npos) << r;
  EXPECT_NE(r.out.find("\"dp\": 4"), std::string::npos) << r;
  EXPECT_TRUE(fs::is_regular_file(sqlite_path()));
  EXPECT_TRUE(fs::is_regular_file(trace_path()));
}

// ---- run: traces and durability --------------------------------------------------------

// output.trace_ranks / output.trace_stages: a trace of the ranks asked for, mirrors
// shown under their own numbers; a rank past the cluster is refused before any run.
TEST_F(CliTest, TraceFiltersPickRanksAndStages) {
  const std::string y = write("pp.yaml",
                              "cluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: gpt3-1.3b, layers: 4}\n"
                              "parallel: {tp: 4, pp: 2}\ntraining: {global_batch: 8}\n");
  const std::string tr = (dir_ / "t.json").string();
  auto pids = [&] {
    std::set<std::string> out;
    const std::string text = read_file(tr);
    for (size_t at = text.find("\"pid\":"); at != std::string::npos; at = text.find("\"pid\":", at + 1))
      out.insert(text.substr(at + 6, text.find_first_of(",}", at + 6) - at - 6));
    return out;
  };
  ASSERT_EQ(cli("run " + quote(y) + " --set output.trace=" + quote(tr) + " --set 'output.trace_ranks=[0, 3, 13]'").code,
            0);
  EXPECT_EQ(pids(), (std::set<std::string>{"0", "3", "13"}));
  ASSERT_EQ(cli("run " + quote(y) + " --set output.trace=" + quote(tr) +
                " --set 'output.trace_ranks=[1, 9]'"
                " --set 'output.trace_stages=[1]'")
                .code,
            0);
  EXPECT_EQ(pids().size(), 1u);  // rank 9 is stage 1's; rank 1 is stage 0's
  const CliResult bad = cli("run " + quote(y) + " --set output.trace=" + quote((dir_ / "u.json").string()) +
                            " --set 'output.trace_stages=[2]'");
  EXPECT_EQ(bad.code, 1) << bad;
  EXPECT_NE(bad.err.find("expected a stage below parallel.pp = 2"), std::string::npos) << bad;
  EXPECT_FALSE(fs::exists(dir_ / "u.json"));
}

// Durability: a run killed with SIGKILL at any moment — while simulating or halfway
// through writing 2 million spans — never leaves a run that looks complete but is not,
// never damages the runs already in the database, and never leaves a half-written trace
// under its real name.
TEST_F(CliTest, SigkillNeverCorruptsTheDatabase) {
  const std::string db = sqlite_path(), trace = (dir_ / "out" / "big.trace.json").string();
  const CliResult first = cli("run " + quote(kExample) + " --set " + quote("output.sqlite=" + db));
  ASSERT_EQ(first.code, 0) << first;
  const std::string big = std::string(CLUSTERSIM_SOURCE_DIR) + "/scenarios/examples/training/llama3-70b-64xh100.yaml";
  auto spans_of_run_1 = [&] {
    sqlite3* h = nullptr;
    sqlite3_open(db.c_str(), &h);
    const std::string n = query_text(h, "SELECT count(*) FROM spans WHERE run_id = 1");
    sqlite3_close(h);
    return n;
  };
  const std::string before = spans_of_run_1();
  ASSERT_NE(before, "0\n");
  for (const char* delay : {"0.2", "0.8", "1.5", "2.5", "4"}) {
    const std::string cmd = "cd " + quote(dir_.string()) + " && (" + quote(CLUSTERSIM_BINARY) + " run " + quote(big) +
                            " --set " + quote("output.sqlite=" + db) + " --set " + quote("output.trace=" + trace) +
                            " >/dev/null 2>&1 & pid=$!; sleep " + delay + "; kill -9 $pid 2>/dev/null; wait $pid) " +
                            ">/dev/null 2>&1";
    std::system(cmd.c_str());
    sqlite3* h = nullptr;
    ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
    EXPECT_EQ(query_text(h, "PRAGMA integrity_check"), "ok\n") << "after a kill at " << delay << " s";
    // Every visible run is complete, and has its metrics and spans (a killed write is
    // rolled back whole when the database is next opened).
    EXPECT_EQ(query_text(h, "SELECT count(*) FROM runs WHERE complete = 0"), "0\n") << delay;
    EXPECT_EQ(query_text(h,
                         "SELECT count(*) FROM runs r WHERE NOT EXISTS (SELECT 1 FROM spans s WHERE s.run_id = "
                         "r.run_id) OR NOT EXISTS (SELECT 1 FROM metrics m WHERE m.run_id = r.run_id)"),
              "0\n")
        << delay;
    sqlite3_close(h);
    EXPECT_EQ(spans_of_run_1(), before) << "the earlier run must be untouched";
    if (fs::exists(trace)) {
      const std::string t = read_file(trace);
      EXPECT_EQ(t.substr(t.size() - 4), "\n]}\n") << "a trace under its real name is complete";
    }
  }
}

// ---- keys ------------------------------------------------------------------------------------

TEST_F(CliTest, KeysListsEveryKey) {
  const CliResult r = cli("keys");
  ASSERT_EQ(r.code, 0) << r;
  for (const char* k : {"parallel.tp", "parallel.dp", "cluster.preset", "model.preset", "output.sqlite", "output.trace",
                        "cluster.scale_out.latency"})
    EXPECT_NE(r.out.find("| `" + std::string(k) + "` |"), std::string::npos) << k << "\n" << r;
}

}  // namespace
