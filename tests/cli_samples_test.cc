// `run --samples N` and `faults:` through the command line: the --json fields, the
// samples and faults tables, the trace's fault track, the same bytes whatever --jobs.
#include <sqlite3.h>

#include "cli_harness.h"

namespace {

class SamplesCliTest : public CliTest {};

int64_t count_rows(const std::string& db_path, const std::string& sql) {
  sqlite3* db = nullptr;
  int64_t n = -1;
  if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
      n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return n;
}

const char* kTraining =
    "cluster: {preset: dgx-h100, nodes: 2}\n"
    "model: {preset: gpt3-1.3b, layers: 4}\n"
    "parallel: {dp: 16}\n"
    "training: {global_batch: 64, duration: 12h}\n"
    "variability: {gpu_speed: {dist: lognormal, sigma: 0.05}, kernel_jitter: 0.02}\n"
    "faults: {gpu_mtbf: 2000h, restart: 10min, checkpoint_bandwidth: 2GB/s}\n";

TEST_F(SamplesCliTest, SamplesReportPercentilesAndTheSameBytesWhateverTheJobs) {
  const std::string s = scenario("s.yaml", kTraining);
  const CliResult one = cli("run " + quote(s) + " --samples 6 --jobs 1 --json");
  ASSERT_EQ(one.code, 0) << one;
  for (const char* k : {"iteration_time_s_p5", "iteration_time_s_p50", "iteration_time_s_p95", "mfu_p5", "mfu_p50",
                        "mfu_p95", "tokens_per_s_p5", "tokens_per_s_p50", "tokens_per_s_p95", "goodput",
                        "checkpoint_interval_s", "goodput_p50"})
    EXPECT_GT(json_field(one.out, k), -1e9) << k << "\n" << one.out;
  EXPECT_LE(json_field(one.out, "iteration_time_s_p5"), json_field(one.out, "iteration_time_s_p50"));
  EXPECT_LE(json_field(one.out, "iteration_time_s_p50"), json_field(one.out, "iteration_time_s_p95"));
  EXPECT_GT(json_field(one.out, "goodput"), 0);
  EXPECT_LT(json_field(one.out, "goodput"), 1);
  EXPECT_EQ(count_rows(sqlite_path(), "SELECT count(*) FROM samples"), 6 * 4);
  EXPECT_EQ(count_rows(sqlite_path(), "SELECT count(DISTINCT seed) FROM samples"), 6);
  EXPECT_GT(count_rows(sqlite_path(), "SELECT count(*) FROM faults WHERE kind = 'checkpoint'"), 0);
  EXPECT_NE(read_file(trace_path()).find("faults (job wall clock)"), std::string::npos);
  const CliResult two = cli("run " + quote(s) + " --samples 6 --jobs 2 --json");
  ASSERT_EQ(two.code, 0) << two;
  EXPECT_EQ(one.out, two.out);
  const CliResult table = cli("run " + quote(s) + " --samples 6");
  EXPECT_NE(table.out.find("samples         6 draws"), std::string::npos) << table;
  EXPECT_NE(table.out.find("goodput "), std::string::npos) << table;
}

// A Chakra workload's draws run at its traces' slowest board, as its draw 0 does: with
// variability that touches none of its ranks (a straggler off the traces), every draw is
// the run itself (the later draws had priced the whole cluster's boards).
TEST_F(SamplesCliTest, ChakraDrawsRunAtTheTracesBoards) {
  const std::string g = scenario("g.yaml",
                                 "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, "
                                 "layers: 2}\nparallel: {tp: 8}\ntraining: {global_batch: 4}\n");
  ASSERT_EQ(cli("export-chakra " + quote(g) + " --out " + quote((dir_ / "ch").string())).code, 0);
  const std::string c = write("c.yaml",
                              "name: c\ncluster: {preset: dgx-h100, nodes: 16}\nworkload: {chakra: ch}\n"
                              "variability: {stragglers: [{gpu: 100, slowdown: 1.5}]}\n");
  const CliResult r = cli("run " + quote(c) + " --samples 3 --json");
  ASSERT_EQ(r.code, 0) << r;
  const double iter = json_field(r.out, "iteration_time_s");
  EXPECT_DOUBLE_EQ(json_field(r.out, "iteration_time_s_p50"), iter) << r.out;
  EXPECT_DOUBLE_EQ(json_field(r.out, "iteration_time_s_p95"), iter) << r.out;
}

// Draws of a variability: that draws nothing at random are one run N times: said, not silent.
TEST_F(SamplesCliTest, SamplesOfNothingRandomAreSaidToBeOneRun) {
  const std::string plain = write("p.yaml",
                                  "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, "
                                  "layers: 2}\ntraining: {global_batch: 8}\n");
  const CliResult r = cli("run " + quote(plain) + " --samples 3 --json");
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_NE(r.err.find("warning: --samples 3 draws the scenario's variability:, which draws nothing at random"),
            std::string::npos)
      << r;
  const CliResult random = cli("run " + quote(scenario("s.yaml", kTraining)) + " --samples 3 --json");
  ASSERT_EQ(random.code, 0) << random;
  EXPECT_EQ(random.err.find("draws nothing at random"), std::string::npos) << random;
}

TEST_F(SamplesCliTest, ServingSamplesReportLatencyPercentilesOverDraws) {
  const std::string s = write(
      "serve.yaml",
      "cluster: {preset: dgx-h100}\nmodel: {preset: llama3-8b}\nparallel: {tp: 1}\n"
      "inference: {replicas: 8, requests: 200, arrivals: {rate_per_s: 40}}\n"
      "variability: {gpu_speed: {dist: lognormal, sigma: 0.1}}\n");
  const CliResult r = cli("run " + quote(s) + " --samples 5 --jobs 2 --json");
  ASSERT_EQ(r.code, 0) << r;
  for (const char* k : {"ttft_s_p50_p5", "ttft_s_p50_p95", "tpot_s_p99_p50", "slo_attainment_p50", "samples"})
    EXPECT_GT(json_field(r.out, k), -1e9) << k << "\n" << r.out;
  EXPECT_LT(json_field(r.out, "tpot_s_p50_p5"), json_field(r.out, "tpot_s_p50_p95")) << r.out;
}

// export-chakra writes one trace per rank and comm_group.json into a folder; a path that
// is a file, or no --out, is refused with nothing written.
TEST_F(SamplesCliTest, ExportChakraWritesAFolderOfTraces) {
  const std::string s = write("s.yaml", "name: ex\ncluster: {preset: dgx-h100}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
                                        "parallel: {tp: 2, dp: 4}\ntraining: {global_batch: 8}\n");
  const CliResult r = cli("export-chakra " + quote(s) + " --out traces");
  ASSERT_EQ(r.code, 0) << r;
  for (int k = 0; k < 8; ++k) EXPECT_TRUE(fs::exists(dir_ / "traces" / ("ex." + std::to_string(k) + ".et"))) << k;
  EXPECT_TRUE(fs::exists(dir_ / "traces" / "comm_group.json"));
  write("w.yaml", "cluster: {preset: dgx-h100}\nworkload: {chakra: traces}\n");
  const CliResult back = cli("run w.yaml --json");
  ASSERT_EQ(back.code, 0) << back;
  const CliResult orig = cli("run " + quote(s) + " --json");
  EXPECT_DOUBLE_EQ(json_field(back.out, "iteration_time_s"), json_field(orig.out, "iteration_time_s"));
  // And the same hardware FLOPs: GEMMs and attention, not the memory kernels' arithmetic.
  const double hw = json_field(orig.out, "hardware_tflops_per_gpu");
  EXPECT_NEAR(json_field(back.out, "hardware_tflops_per_gpu"), hw, 1e-9 * hw);
  // The traces' run has no model: its table, its plan and a second export read the traces.
  const CliResult table = cli("run w.yaml");
  EXPECT_EQ(table.code, 0) << table;
  EXPECT_NE(table.out.find("workload        Chakra traces in traces (8 ranks"), std::string::npos) << table;
  const CliResult plan = cli("plan w.yaml --out p.json");
  EXPECT_EQ(plan.code, 0) << plan;
  EXPECT_NE(read_file(dir_ / "p.json").find("\"world_size\":8,"), std::string::npos);
  EXPECT_EQ(cli("export-chakra w.yaml --out again").code, 0);
  EXPECT_GT(read_file(dir_ / "again" / "w.7.et").size(), 1000u);  // the traces' name is the scenario's: w
  // An export of fewer ranks over it is refused: the 8-rank export's ex.4-7 would be read
  // back with the 4 new ones as one workload.
  const CliResult fewer =
      cli("export-chakra " + quote(s) + " --set parallel.dp=2 --set cluster.gpus_per_node=4 --out traces");
  EXPECT_EQ(fewer.code, 1) << fewer;
  EXPECT_NE(fewer.err.find("holds ex.4.et, a rank past this export's 4"), std::string::npos) << fewer;
  EXPECT_EQ(cli("export-chakra " + quote(s) + " --out traces").code, 0) << "the same export again is fine";
  // Another workload's export into the folder would replace the comm_group.json the traces
  // there read (here the traces the scenario itself reads): refused, nothing replaced.
  const std::string groups = read_file(dir_ / "traces" / "comm_group.json");
  for (const char* other : {"w.yaml", "again.yaml"}) {
    if (std::string(other) == "again.yaml")
      write("again.yaml",
            "name: again\ncluster: {preset: dgx-h100}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
            "parallel: {dp: 8}\ntraining: {global_batch: 8}\n");
    const CliResult mixed = cli(std::string("export-chakra ") + other + " --out traces");
    EXPECT_EQ(mixed.code, 1) << mixed;
    EXPECT_NE(mixed.err.find("holds ex.0.et, a trace of workload 'ex'"), std::string::npos) << mixed;
  }
  EXPECT_EQ(read_file(dir_ / "traces" / "comm_group.json"), groups);
  EXPECT_FALSE(fs::exists(dir_ / "traces" / "again.0.et"));
  write("file", "x");
  EXPECT_EQ(cli("export-chakra " + quote(s) + " --out file").code, 1);
  expect_usage_error(cli("export-chakra " + quote(s)), "--out");
}

TEST_F(SamplesCliTest, BadSampleCountsAreUsageErrors) {
  const std::string s = write("s.yaml", kTraining);
  for (const char* bad : {"--samples 0", "--samples x", "--samples", "--jobs 0"})
    expect_usage_error(cli("run " + quote(s) + " " + bad), bad[2] == 's' ? "--samples" : "--jobs");
  // Threads for samples that are not drawn would be ignored: said instead.
  expect_usage_error(cli("run " + quote(s) + " --jobs 2"), "expected --samples N too");
  // Every command reads --jobs the same way: a usage error, as run's.
  for (const char* cmd : {"sweep ", "search ", "accuracy "})
    expect_usage_error(cli(cmd + quote(s) + " --jobs 0"), "--jobs expects an integer from 1 to 1024");
}

}  // namespace
