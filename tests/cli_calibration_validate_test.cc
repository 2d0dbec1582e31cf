// End-to-end tests of calibration profiles, the GPU commands' hand-off to clustersim-real,
// and validate against recorded real runs.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli_harness.h"

namespace {

// A suite of its own: CliTest is a fixture of each translation unit.
using CalibrationCliTest = CliTest;

// Naming the defaults profile changes nothing; a profile with slower links slows the run.
TEST_F(CalibrationCliTest, CalibrationProfileFeedsTheCostModels) {
  const std::string defaults = std::string(CLUSTERSIM_SOURCE_DIR) + "/calibrate/profiles/defaults.yaml";
  const std::string scenario = std::string(CLUSTERSIM_SOURCE_DIR) + "/scenarios/examples/llama3-8b-128xh100.yaml";
  auto iteration = [&](const std::string& extra) {
    const CliResult r = cli("run " + quote(scenario) + " --set " +
                            quote("output.sqlite=" + (dir_ / "x.sqlite").string()) + extra + " --json");
    EXPECT_EQ(r.code, 0) << r;
    const size_t at = r.out.find("\"iteration_time_s\": ");
    return at == std::string::npos ? 0.0 : std::stod(r.out.substr(at + 20));
  };
  const double base = iteration("");
  EXPECT_DOUBLE_EQ(iteration(" --set " + quote("calibration=" + defaults)), base);
  const std::string slow = (dir_ / "slow.yaml").string();
  std::ofstream(slow) << "network: {link_efficiency: {network: 0.3}}\ncompute: {gemm_efficiency: 0.5}\n";
  EXPECT_GT(iteration(" --set " + quote("calibration=" + slow)), 1.2 * base);
  const CliResult bad = cli("run " + quote(scenario) + " --set calibration=/nonexistent.yaml");
  EXPECT_EQ(bad.code, 1) << bad;
  EXPECT_NE(bad.err.find("does not exist"), std::string::npos) << bad;

  const CliResult c =
      cli("collective --op all-reduce --gpus 8 --cluster dgx-h100 --min 1GiB --max 1GiB --algo ring --proto Simple "
          "--profile " +
          quote(slow));
  EXPECT_EQ(c.code, 0) << c;
}

}  // namespace

namespace {

// The committed H200 profile loads, and its GEMM interpolation's held-out error is what
// docs/accuracy.md reports (a grid twice as coarse predicting the points between).
TEST_F(CalibrationCliTest, ProfileCheckOfTheH200Profile) {
  const CliResult r =
      cli("profile-check " + quote(std::string(CLUSTERSIM_SOURCE_DIR) + "/calibrate/profiles/h200.yaml"));
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_NE(r.out.find("held-out shapes"), std::string::npos) << r;
  const size_t at = r.out.find("median |err| ");
  ASSERT_NE(at, std::string::npos) << r;
  EXPECT_LT(std::stod(r.out.substr(at + 13)), 10.0) << r;
  // The large GEMM rows by how full their last wave of tiles is: every one of them in a bin;
  // where the last wave is 0.6-0.75 full, the padded form is ~10 % slow and the stream-K
  // candidate (compute.gemm_stream_k, the figure in parentheses) within a few percent.
  const size_t bins = r.out.find("by how full their last wave of 128 x 256 tiles is on 132 SMs");
  ASSERT_NE(bins, std::string::npos) << r;
  int rows = 0;
  for (const char* label : {"    < 0.6 ", "    0.6-0.75 ", "    0.75-0.9 ", "    0.9-0.97 ", "    >= 0.97 "}) {
    const size_t b = r.out.find(label, bins);
    ASSERT_NE(b, std::string::npos) << label << "\n" << r;
    rows += std::stoi(r.out.substr(b + std::string(label).size()));
  }
  EXPECT_EQ(rows, 1909) << "the H200 table's GEMM rows of 1,024 and more on every side\n" << r;
  const size_t partial = r.out.find("    0.6-0.75 ", bins);
  const double padded = std::stod(r.out.substr(r.out.find("median ", partial) + 7));
  const double stream_k = std::stod(r.out.substr(r.out.find("(", partial) + 1));
  EXPECT_GT(padded, 1.05) << r;
  EXPECT_NEAR(stream_k, 1.0, 0.03) << r;
  const CliResult none =
      cli("profile-check " + quote(std::string(CLUSTERSIM_SOURCE_DIR) + "/calibrate/profiles/defaults.yaml"));
  EXPECT_EQ(none.code, 1) << none;
  EXPECT_NE(none.err.find("no GEMM or attention table"), std::string::npos) << none;
}

// The built-in attention form against SDPA's tables of an H100 and an H200, each call timed
// queued behind a spin between two events, its kernels back to back inside
// (calibrate/measurements/pytorch/run6): the forward within 1 % in median and 2 % in median
// |error|, the backward call within 2.5 % and 3.5 % (1.010 / 2.3 % on the H200, whose table
// the backward factor is fitted to; 1.020 / 2.9 % on the H100, held out), on both boards; head
// dims 64 and 128 both (the per-pass exponents of (d/128)^x were measured on these tables), MHA
// and GQA (the backward's reductions).
TEST_F(CalibrationCliTest, ProfileCheckSetsTheBuiltInModelAgainstTheSdpaTables) {
  const std::string dir = std::string(CLUSTERSIM_SOURCE_DIR) + "/calibrate/measurements/pytorch/run6/";
  for (const char* board : {"h100", "h200"}) {
    const CliResult r =
        cli("profile-check " + quote(dir + board + "/sdpa.yaml") + " --gpu " + std::string(board) + "-sxm");
    ASSERT_EQ(r.code, 0) << r;
    EXPECT_TRUE(r.err.empty()) << r;
    auto field = [&](const std::string& row, const std::string& key) {
      const size_t at = r.out.find(row);
      if (at == std::string::npos) return -1.0;
      const size_t k = r.out.find(key, at);
      return k == std::string::npos ? -1.0 : std::stod(r.out.substr(k + key.size()));
    };
    EXPECT_EQ(field("attention forward", "  "), 228) << r;
    EXPECT_NEAR(field("attention forward", "median "), 1.0, 0.01) << r;
    EXPECT_LT(field("attention forward", "median |err| "), 2.0) << r;
    EXPECT_NEAR(field("attention backward", "median "), 1.0, 0.025) << r;
    EXPECT_LT(field("attention backward", "median |err| "), 3.5) << r;
    EXPECT_EQ(r.out.find("gemm interpolation"), std::string::npos) << r;
  }
  // Checked as another board, it says so.
  const CliResult other = cli("profile-check " + quote(dir + "h100/sdpa.yaml") + " --gpu a100-sxm-80gb");
  ASSERT_EQ(other.code, 0) << other;
  EXPECT_NE(other.err.find("warning: the profile was measured on NVIDIA H100 80GB HBM3, checked here as a100-sxm-80gb"),
            std::string::npos)
      << other;
}

// A simulation does not load cuBLASLt and NCCL (~200 MB resident at start): the commands
// that drive GPUs run in clustersim-real, to which clustersim hands them.
TEST_F(CalibrationCliTest, SimulatorStartsWithoutTheGpuLibraries) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's shadow memory inflates the resident size";
#else
  // RUSAGE_CHILDREN keeps the largest child this process has waited for, so the reading
  // says something of --version only while no earlier child was that large (ctest runs
  // each test in a process of its own).
  constexpr long kBoundKb = 64 * 1024;
  rusage before{};
  ASSERT_EQ(::getrusage(RUSAGE_CHILDREN, &before), 0);
  if (before.ru_maxrss >= kBoundKb)
    GTEST_SKIP() << "an earlier child of this process held " << before.ru_maxrss << " KB";
  const CliResult r = cli("--version");
  ASSERT_EQ(r.code, 0) << r;
  rusage children{};
  ASSERT_EQ(::getrusage(RUSAGE_CHILDREN, &children), 0);
  EXPECT_LT(children.ru_maxrss, kBoundKb) << "KB resident, the largest child so far";
#endif
}

TEST_F(CalibrationCliTest, GpuCommandsReachTheGpuBinary) {
  if (fs::exists("/dev/nvidia0")) GTEST_SKIP() << "a GPU is present: calibrate would measure it";
  const CliResult r = cli("calibrate --suite gemm --out " + quote((dir_ / "p.yaml").string()));
  EXPECT_EQ(r.code, 3) << r;
#ifdef CLUSTERSIM_REAL_BACKEND_BUILT
  EXPECT_NE(r.err.find("calibrate measures a GPU, and this machine has none"), std::string::npos) << r;
#else
  EXPECT_NE(r.err.find("needs the real backend"), std::string::npos) << r;
#endif
  EXPECT_FALSE(fs::exists(dir_ / "p.yaml"));
}

#ifdef CLUSTERSIM_REAL_BACKEND_BUILT
// clustersim copied away from clustersim-real says where the GPU commands went.
TEST_F(CalibrationCliTest, GpuCommandWithoutTheGpuBinaryNamesIt) {
  const fs::path alone = dir_ / "bin" / "clustersim";
  fs::create_directories(alone.parent_path());
  fs::copy_file(CLUSTERSIM_BINARY, alone);
  const std::string cmd = quote(alone.string()) + " calibrate --suite gemm --out " + quote((dir_ / "p.yaml").string()) +
                          " 2>" + quote((dir_ / "e").string());
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3);
  const std::string err = read_file(dir_ / "e");
  EXPECT_NE(err.find("calibrate runs in " + (dir_ / "bin" / "clustersim-real").string()), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(dir_ / "p.yaml"));
  // real's, validate's and calibrate's arguments are still checked: a usage error exits 2, a
  // scenario or value that is not there 1, and good ones name the missing binary (3).
  const struct {
    std::string line;
    int code;
    const char* says;
  } lines[] = {{"real --bogus", 2, "unknown option '--bogus' for real"},
               {"validate " + quote(kExample) + " --iterations x", 2, "--iterations expects an integer"},
               {"real nothere.yaml", 1, "nothere.yaml: error: cannot read scenario file"},
               {"validate nothere.yaml --profile p.yaml", 1, "nothere.yaml: error: cannot read scenario file"},
               {"calibrate --suite gemm", 2, "calibrate needs --out P.yaml"},
               {"calibrate --out p.yaml --suite gemms", 1, "--suite: error: unknown suite 'gemms'"},
               {"calibrate --out p.yaml --passes 0", 1, "--passes: error: '0' is not a pass count"},
               {"real " + quote(kExample) + " --iterations 1", 3, "real runs in "}};
  for (const auto& l : lines) {
    const int st =
        std::system((quote(alone.string()) + " " + l.line + " >/dev/null 2>" + quote((dir_ / "e").string())).c_str());
    ASSERT_TRUE(WIFEXITED(st)) << l.line;
    EXPECT_EQ(WEXITSTATUS(st), l.code) << l.line << ": " << read_file(dir_ / "e");
    EXPECT_NE(read_file(dir_ / "e").find(l.says), std::string::npos) << l.line << ": " << read_file(dir_ / "e");
  }
}

// The usage of a GPU command needs neither a GPU nor the binary that drives them.
TEST_F(CalibrationCliTest, GpuCommandHelpWithoutTheGpuBinary) {
  const fs::path alone = dir_ / "bin" / "clustersim";
  fs::create_directories(alone.parent_path());
  fs::copy_file(CLUSTERSIM_BINARY, alone);
  for (const char* line : {"validate --help", "real -h", "calibrate --suite gemm --help", "validate S.yaml -h"}) {
    const std::string cmd =
        quote(alone.string()) + " " + line + " >" + quote((dir_ / "o").string()) + " 2>" + quote((dir_ / "e").string());
    const int status = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(status)) << line;
    EXPECT_EQ(WEXITSTATUS(status), 0) << line << ": " << read_file(dir_ / "e");
    EXPECT_NE(read_file(dir_ / "o").find("usage: clustersim"), std::string::npos) << line;
  }
}

// clustersim-real S.yaml is clustersim real S.yaml.
TEST_F(CalibrationCliTest, ClustersimRealRunsAScenario) {
  if (fs::exists("/dev/nvidia0")) GTEST_SKIP() << "a GPU is present: the plan would run on it";
  const std::string real = fs::path(CLUSTERSIM_BINARY).parent_path() / "clustersim-real";
  const std::string cmd =
      quote(real) + " " + quote(kExample) + " >" + quote((dir_ / "o").string()) + " 2>" + quote((dir_ / "e").string());
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3);
  EXPECT_NE(read_file(dir_ / "e").find("this machine has 0 GPU(s)"), std::string::npos) << read_file(dir_ / "e");
  EXPECT_EQ(read_file(dir_ / "e").find("unknown command"), std::string::npos);
}
#endif

// The committed H200 profile against the real runs recorded on an H200 (validate
// --real-from, no GPU needed): every scenario within the accuracy targets that
// docs/accuracy.md reports (per-op median 3 %, p95 10 %, iteration 5 %). A change to the
// cost models that loses accuracy on real hardware fails here.
TEST_F(CalibrationCliTest, ValidateAgainstRecordedRealRunsMeetsTheTargets) {
  const std::string src = CLUSTERSIM_SOURCE_DIR;
  for (const std::string s : {"validation/gpt3-1.3b-mb3-1xh200", "validation/gpt-2560-seq3072-1xh200",
                              "validation/llama3-8b-4layers-1xh200", "real/gpt3-1.3b-1xh200"}) {
    const std::string name = s.substr(s.find('/') + 1);
    const CliResult r = cli("validate " + quote(src + "/scenarios/examples/" + s + ".yaml") + " --profile " +
                            quote(src + "/calibrate/profiles/h200-own-attention.yaml") + " --real-from " +
                            quote(src + "/calibrate/measurements/validation/" + name + ".sqlite") + " --set " +
                            quote("output.sqlite=" + (dir_ / "v.sqlite").string()) + " --json");
    ASSERT_EQ(r.code, 0) << r;
    EXPECT_GT(json_field(r.out, "ops_compared"), 100) << r;
    EXPECT_LE(json_field(r.out, "median_abs_error"), 0.03) << name << "\n" << r;
    EXPECT_LE(json_field(r.out, "p95_abs_error"), 0.10) << name << "\n" << r;
    EXPECT_LE(std::fabs(json_field(r.out, "iteration_error")), 0.05) << name << "\n" << r;
  }
  // A recording of another plan is refused, naming the first op that differs.
  const CliResult other =
      cli("validate " + quote(src + "/scenarios/examples/validation/gpt-2560-seq3072-1xh200.yaml") + " --real-from " +
          quote(src + "/calibrate/measurements/validation/llama3-8b-4layers-1xh200.sqlite") + " --set " +
          quote("output.sqlite=" + (dir_ / "v.sqlite").string()));
  EXPECT_EQ(other.code, 1) << other;
  EXPECT_NE(other.err.find("is of another plan"), std::string::npos) << other;
  // The same model at another length has the same ops by name: the shapes tell.
  const CliResult shorter =
      cli("validate " + quote(src + "/scenarios/examples/validation/llama3-8b-4layers-1xh200.yaml") +
          " --set model.seq_len=2048 --real-from " +
          quote(src + "/calibrate/measurements/validation/llama3-8b-4layers-1xh200.sqlite") + " --set " +
          quote("output.sqlite=" + (dir_ / "refused.sqlite").string()));
  EXPECT_EQ(shorter.code, 1) << shorter;
  EXPECT_NE(shorter.err.find("is of another plan"), std::string::npos) << shorter;
  EXPECT_NE(shorter.err.find(", expected the scenario's "), std::string::npos) << shorter;
  EXPECT_FALSE(fs::exists(dir_ / "refused.sqlite")) << "nothing written for a refused recording";
  // A --profile that is no profile is named itself, not the scenario that it replaces.
  ASSERT_EQ(::mkfifo((dir_ / "fifo").c_str(), 0600), 0);
  const CliResult fifo = cli("validate " + quote(src + "/scenarios/examples/validation/gpt3-1.3b-mb3-1xh200.yaml") +
                             " --profile " + quote((dir_ / "fifo").string()) + " --real-from " +
                             quote(src + "/calibrate/measurements/validation/gpt3-1.3b-mb3-1xh200.sqlite") + " --set " +
                             quote("output.sqlite=" + (dir_ / "fifo.sqlite").string()));
  EXPECT_EQ(fifo.code, 1) << fifo;
  EXPECT_EQ(fifo.err.rfind((dir_ / "fifo").string() + ": error: ", 0), 0) << fifo;
  EXPECT_FALSE(fs::exists(dir_ / "fifo.sqlite")) << fifo;
  for (const char* bad : {" --iterations x", " --warmup -1", " --iterations 99999999999999999999"}) {
    const CliResult count = cli("validate " + quote(kExample) + bad + " --real-from /nonexistent.sqlite");
    EXPECT_EQ(count.code, 2) << count;
    EXPECT_NE(count.err.find("expects an integer from"), std::string::npos) << count;
  }
  const CliResult missing = cli("validate " + quote(kExample) + " --real-from /nonexistent.sqlite");
  EXPECT_EQ(missing.code, 1) << missing;
  EXPECT_NE(missing.err.find("/nonexistent.sqlite: error: file does not exist"), std::string::npos) << missing;
}

// Without a GPU the GPU commands say so and fail cleanly.
TEST_F(CalibrationCliTest, GpuCommandsFailCleanlyWithoutAGpu) {
  const CliResult r = cli("real " + quote(kExample) + " --iterations 1");
  if (r.code == 0) GTEST_SKIP() << "this machine has a GPU";
  EXPECT_EQ(r.code, 3) << r;
  EXPECT_TRUE(r.out.empty()) << r;
  for (const char* cmd : {"real ", "validate "}) {
    const CliResult t = cli(cmd + quote(kExample) + " --timing stream --iterations 1");
    EXPECT_EQ(t.code, 3) << t;
    EXPECT_TRUE(t.out.empty()) << t;
  }
}

}  // namespace

namespace clustersim {
namespace {

// A real run's ranks name the board they ran on, and validate --real-from carries it from
// the recording into what it writes and prints; a recording without it names the file alone.
TEST_F(CalibrationCliTest, ValidateCarriesTheRecordedBoard) {
  const std::string src = CLUSTERSIM_SOURCE_DIR;
  const std::string scenario = quote(src + "/scenarios/examples/validation/gpt3-1.3b-mb3-1xh200.yaml");
  const fs::path recording = dir_ / "recorded.sqlite";
  fs::copy_file(src + "/calibrate/measurements/validation/gpt3-1.3b-mb3-1xh200.sqlite", recording);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(recording.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "UPDATE ranks SET device = 'gpu' || rank || ' (NVIDIA H200)' WHERE run_id IN "
                         "(SELECT run_id FROM runs WHERE source = 'real')",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  const fs::path out = dir_ / "validated.sqlite";
  const CliResult r = cli("validate " + scenario + " --real-from " + quote(recording.string()) + " --set " +
                          quote("output.sqlite=" + out.string()));
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_NE(r.out.find("on NVIDIA H200, the real run in"), std::string::npos) << r;
  ASSERT_EQ(sqlite3_open_v2(out.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  EXPECT_EQ(query_text(db, "SELECT DISTINCT r.device FROM ranks r JOIN runs u USING (run_id) WHERE u.source = 'real'"),
            "gpu0 (NVIDIA H200)\n");
  sqlite3_close(db);
  // The committed recordings predate the board's name: the slot alone.
  const CliResult plain = cli("validate " + scenario + " --real-from " +
                              quote(src + "/calibrate/measurements/validation/gpt3-1.3b-mb3-1xh200.sqlite"));
  ASSERT_EQ(plain.code, 0) << plain;
  EXPECT_NE(plain.out.find(" on the real run in "), std::string::npos) << plain;
}

// A real run timed with no event between its ops (--timing stream, recorded on one H100):
// validate reads the mode back, compares the iteration with the simulated kernels from a full
// queue (the recording's simulated twin ran so), and has no per-op rows to give.
TEST_F(CalibrationCliTest, ValidateReadsAStreamTimedRecording) {
  const std::string src = CLUSTERSIM_SOURCE_DIR;
  const std::string scenario = quote(src + "/scenarios/examples/real/gpt3-1.3b-1xh200.yaml") +
                               " --set cluster.preset=dgx-h100 --set cluster.gpus_per_node=1";
  const std::string recording =
      quote(src + "/calibrate/measurements/stream-timing-h100-2026-12-06/out/gpt3-1.3b-1xh200-stream-3.sqlite");
  const CliResult r = cli("validate " + scenario + " --real-from " + recording + " --json");
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(json_field(r.out, "ops_compared"), 0) << r;
  EXPECT_EQ(r.out.find("median_abs_error"), std::string::npos) << r;
  EXPECT_NEAR(json_field(r.out, "real_iteration_s"), 0.2798, 0.0005) << r;
  // Kernels from a full queue: 6.6 ms shorter than as timed, and 3-6 % slow on this board
  // with the built-in defaults (docs/accuracy.md), as the run recorded it.
  EXPECT_NEAR(json_field(r.out, "sim_iteration_s"), 0.2912, 0.003) << r;
  EXPECT_GT(json_field(r.out, "iteration_error"), 0.0) << r;
  EXPECT_LT(json_field(r.out, "iteration_error"), 0.08) << r;
  const CliResult text = cli("validate " + scenario + " --real-from " + recording);
  ASSERT_EQ(text.code, 0) << text;
  EXPECT_NE(text.out.find("on NVIDIA H100 80GB HBM3, the real run in"), std::string::npos) << text;
  EXPECT_NE(text.out.find("per-op error    not measured (--timing stream"), std::string::npos) << text;
  // Serving validation times each iteration's ops: stream timing is refused there.
  const std::string serving_scenario = src + "/scenarios/examples/validation/llama3-8b-serving-1xh200.yaml";
  const CliResult serving = cli("validate " + quote(serving_scenario) + " --timing stream --real-from " + recording);
  EXPECT_EQ(serving.code, 2) << serving;
  EXPECT_NE(serving.err.find("--timing stream times training steps"), std::string::npos) << serving;
  // The recording's mode wins; another one asked for is refused.
  const CliResult ops = cli("validate " + scenario + " --real-from " + recording + " --timing ops");
  EXPECT_EQ(ops.code, 1) << ops;
  EXPECT_NE(ops.err.find("its real run was timed with --timing stream, expected the --timing given"), std::string::npos)
      << ops;
}

}  // namespace
}  // namespace clustersim
