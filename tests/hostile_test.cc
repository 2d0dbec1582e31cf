// Hostile inputs, one test per class: overflow past int64 picoseconds or bytes (class 3),
// inputs accepted and then unbounded (4), misleading or leaking messages (5), and
// nondeterministic output (6). Each runs the binary under a time limit: a hang fails.
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include "tests/cli_harness.h"

namespace {

class HostileTest : public CliTest {
 protected:
  std::string small() {
    return write("s.yaml", "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
                           "parallel: {tp: 8}\n");
  }
  // `args` under a 20 s limit (exit 124 when it runs past it); the wall time in `seconds`.
  CliResult timed(const std::string& args, double& seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    CliResult r = cli(args, 20);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }
  void expect_refused_fast(const std::string& args, const std::string& phrase) {
    double s = 0;
    const CliResult r = timed(args, s);
    EXPECT_EQ(r.code, 1) << args << "\n" << r;
    EXPECT_NE(r.err.find(phrase), std::string::npos) << args << "\nexpected: " << phrase << "\n" << r;
    EXPECT_LT(s, 5.0) << args;
  }
  // `run` of a scenario file `name` holding `yaml`, refused as expect_refused_fast says.
  void expect_run_refused(const std::string& name, const std::string& yaml, const std::string& phrase) {
    expect_refused_fast("run " + quote(write(name, yaml)), phrase);
  }
};

// ---- class 3: quantities past int64 picoseconds or bytes --------------------------------

TEST_F(HostileTest, AOneBpsNicIsRefusedNotFaster) {
  expect_refused_fast("run " + quote(small()) + " --set cluster.scale_out.nic_bandwidth=1bps", "out of range");
}

TEST_F(HostileTest, ALinkLatencyOf1e7sIsRefused) {
  expect_refused_fast("run " + quote(small()) + " --set cluster.scale_out.latency=1e7s", "at most 1e6 s");
  // In a time's range, but paid on every transfer: a topology file's link at 1e6 s had
  // overflowed the clock with no place named.
  expect_refused_fast("run " + quote(small()) + " --set cluster.scale_out.latency=2s",
                      "cluster.scale_out.latency is 2s, expected at most 1s");
  write("t.yaml", "nodes:\n  - {preset: dgx-h100, count: 2}\nfabric: {topology: switch, latency: 1e6s}\n");
  expect_run_refused("tf.yaml", "cluster: {topology_file: t.yaml}\nmodel: {preset: gpt3-1.3b, layers: 2}\n",
                     "t.yaml:3:37: error: fabric.latency is 1e6s, expected at most 1s");
}

TEST_F(HostileTest, AHugeCapacityFactorIsRefused) {
  const std::string s = write("m.yaml", "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: mixtral-8x7b, layers: 2}\n"
                                        "parallel: {tp: 8}\n");
  expect_refused_fast("run " + quote(s) + " --set model.moe.capacity_factor=1e20", "expected 1 to 64");
  // A capacity beside a dropless router (the default) asks for two things at once: the time
  // had padded every expert to it while the memory check kept the dropless rows.
  expect_refused_fast("run " + quote(s) + " --set model.moe.capacity_factor=2",
                      "model.moe.capacity_factor = 2 caps (and pads) each expert's tokens, which a dropless router "
                      "does not");
  EXPECT_EQ(cli("run " + quote(s) + " --set model.moe.capacity_factor=2 --set model.moe.routing.dropless=false").code,
            0);
}

TEST_F(HostileTest, AProfileLaunchOverheadOf1e7sIsRefused) {
  write("p.yaml", "compute:\n  launch_overhead: 1e7s\n");
  const std::string s = write("c.yaml", "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
                                        "calibration: p.yaml\n");
  double t = 0;
  const CliResult r = timed("run " + quote(s), t);
  EXPECT_NE(r.code, 0) << r;
  EXPECT_NE(r.err.find("out of range"), std::string::npos) << r;
  // In the range a time has, but paid per kernel: it overflowed the clock with no place named.
  write("q.yaml", "compute:\n  kernel_latency: 1e6s\n");
  expect_refused_fast("run " + quote(s) + " --set calibration=q.yaml",
                      "q.yaml:2:19: error: profile.compute.kernel_latency is 1e6s, expected at most 1s");
}

// Serving lengths that no engine would take: a context past model.seq_len for every request, a
// shared prefix longer than every prompt, a lookahead past 256 draft tokens, requests beside a
// trace; a GPU of 80 bytes (a size without a unit is bytes); a rate so small its span is
// infinite is said as such, not as "null".
TEST_F(HostileTest, ServingLengthsNoEngineTakesAreRefusedAtTheirKey) {
  const std::string serve = "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b}\n";
  const std::string f = write("sv.yaml", serve + "inference: {requests: 10}\n");
  expect_refused_fast("run " + quote(f) +
                          " --set inference.prompt_tokens.value=8000 --set "
                          "inference.output_tokens.value=8000",
                      "the shortest request, a prompt of 8000 and an output of 8000 tokens, runs past model.seq_len");
  expect_refused_fast("run " + quote(f) +
                          " --set inference.prompt_tokens.value=128 --set "
                          "inference.shared_prefix.tokens=5000 --set inference.shared_prefix.groups=1",
                      "inference.shared_prefix.tokens = 5000 is longer than every prompt (at most 128 tokens)");
  // Half a shared prefix would share nothing, silently; groups: 0 written turns it off.
  expect_refused_fast("run " + quote(f) + " --set inference.shared_prefix.tokens=256",
                      "inference.shared_prefix.tokens is set but no shared_prefix.groups");
  expect_refused_fast("run " + quote(f) + " --set inference.shared_prefix.groups=4",
                      "inference.shared_prefix.groups is set but no shared_prefix.tokens");
  EXPECT_EQ(
      cli("run " + quote(f) + " --set inference.shared_prefix.tokens=64 --set inference.shared_prefix.groups=0").code,
      0);
  expect_refused_fast("run " + quote(f) + " --set inference.speculative.lookahead=100000", "expected at most 256");
  expect_refused_fast("run " + quote(f) + " --set inference.arrivals.rate_per_s=4.9e-324",
                      "the arrivals would span over 1e300 s");
  expect_refused_fast("run " + quote(f) + " --set cluster.gpu_spec.hbm=80", "is under 1 GiB");
  // inference.requests serves a trace's first rows, and no more than it has.
  write("t.csv", "0,100,10\n1,100,10\n");
  const std::string traced = write("tr.yaml", serve + "inference: {requests: 3, arrivals: {trace: t.csv}}\n");
  expect_refused_fast("run " + quote(traced), "inference.requests = 3 asks for more requests than trace");
  const CliResult one = cli("run " + quote(traced) + " --set inference.requests=1 --json", 20);
  ASSERT_EQ(one.code, 0) << one;
  EXPECT_NE(one.out.find("\"requests\": 1,"), std::string::npos) << one;
  // Memory figures are whole bytes, as a training run's.
  const CliResult r = cli("run " + quote(f) + " --json", 20);
  ASSERT_EQ(r.code, 0) << r;
  for (const char* key : {"memory_reserved_bytes", "memory_kv_cache_bytes", "memory_weights_bytes"}) {
    const size_t at = r.out.find(std::string("\"") + key + "\": ");
    ASSERT_NE(at, std::string::npos) << key;
    const double v = std::stod(r.out.substr(at + std::string(key).size() + 4));
    EXPECT_GT(v, 0) << key;
    EXPECT_EQ(v, std::floor(v)) << key;
  }
}

// A sweep list is values, each once, of settings a point can change; --set on a swept key
// and an empty --out are refused before any point runs.
TEST_F(HostileTest, SweepListsAreValuesEachOnce) {
  const std::string base = "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n";
  expect_refused_fast("sweep " + quote(write("n.yaml", base + "sweep:\n  parallel.tp: [1, null]\n")) + " --out " +
                          quote((dir_ / "n.sqlite").string()),
                      "n.yaml:4:20: error: sweep.parallel.tp: expected a value, got nothing");
  expect_refused_fast("sweep " + quote(write("d.yaml", base + "sweep:\n  parallel.tp: [2, 2]\n")),
                      "sweep.parallel.tp: '2' is listed twice");
  // One value spelled two ways is one point twice (they had both run).
  for (const auto& [list, says] : std::vector<std::pair<std::string, std::string>>{
           {"parallel.tp: [1, +1]", "'+1' is '1' again"},
           {"faults.restart: [1h, 60min]", "'60min' is '1h' again"},
           {"cluster.scale_out.nic_bandwidth: [400Gbps, 50GB/s]", "'50GB/s' is '400Gbps' again"}})
    expect_refused_fast("sweep " + quote(write("t.yaml", base + "sweep:\n  " + list + "\n")), says);
  expect_refused_fast("sweep " + quote(write("o.yaml", base + "sweep:\n  output.sqlite: [a.sqlite, b.sqlite]\n")),
                      "output.sqlite names the run's files");
  const std::string ok = write("k.yaml", base + "sweep:\n  parallel.tp: [1, 2]\n");
  expect_refused_fast("sweep " + quote(ok) + " --set parallel.tp=8", "--set: error: parallel.tp is swept");
  expect_refused_fast("sweep " + quote(ok) + " --out ''", "--out: error: expected a database file name");
  // A value holding ", " is quoted in the settings: two points never share a database row.
  const std::string commas = write("c.yaml", base +
                                                 "sweep:\n  name: [\"x, parallel.tp=2\", x]\n"
                                                 "  parallel.tp: [1, \"2\"]\n");
  const CliResult both =
      cli("sweep " + quote(commas) + " --out " + quote((dir_ / "c.sqlite").string()) + " --json", 60);
  ASSERT_EQ(both.code, 0) << both;
  EXPECT_NE(both.out.find("\"settings\": \"name=\\\"x, parallel.tp=2\\\", parallel.tp=1\""), std::string::npos) << both;
  const CliResult again =
      cli("sweep " + quote(commas) + " --out " + quote((dir_ / "c.sqlite").string()) + " --json", 60);
  EXPECT_EQ(again.out, both.out) << "a second sweep reads each of the four points back";
  // --set sweep.KEY=[...] sets one list of the sweep (its keys are key paths), or adds one.
  expect_refused_fast("sweep " + quote(ok) + " --set sweep.parallel.nosuch=[1]",
                      "sweep: unknown key 'parallel.nosuch', expected a key that takes a value");
  expect_refused_fast("sweep " + quote(ok) + " --set sweep.parallel.tp=4",
                      "sweep.parallel.tp must be a non-empty list of values");
  const CliResult narrowed =
      cli("sweep " + quote(ok) + " --set 'sweep.parallel.tp=[2]' --set " + "'sweep.parallel.micro_batch=[1,2]' --out " +
              quote((dir_ / "s.sqlite").string()) + " --json",
          60);
  ASSERT_EQ(narrowed.code, 0) << narrowed;
  EXPECT_NE(narrowed.out.find("\"points\": 2,"), std::string::npos) << narrowed;
  EXPECT_NE(narrowed.out.find("\"settings\": \"parallel.tp=2, parallel.micro_batch=2\""), std::string::npos)
      << narrowed;
  EXPECT_EQ(narrowed.out.find("parallel.tp=1"), std::string::npos) << narrowed;
}

// Numbers as YAML writes them: a leading + on an integer as on a float; hex is an integer
// form, never a float's (strtod would take 0x10 as 16).
TEST_F(HostileTest, NumbersReadAsYamlWritesThem) {
  const std::string serve = write("sv.yaml",
                                  "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b}\n"
                                  "inference: {requests: 5}\n");
  expect_refused_fast("run " + quote(serve) + " --set inference.arrivals.rate_per_s=0x10",
                      "inference.arrivals.rate_per_s must be a number, got '0x10'");
  EXPECT_EQ(cli("run " + quote(serve) + " --set seed=+1", 20).code, 0);
}

// A name is printed as is in the summary: a control character (an escape sequence, a bell, a
// line break) is refused at its line, not sent to the terminal.
TEST_F(HostileTest, AControlCharacterInTheNameIsRefused) {
  const std::string body = "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n";
  for (const char* name : {"\"a\\e[31mred\"", "\"bell\\x07\"", "\"del\\x7f\"", "\"c1\\u0085\""})
    expect_refused_fast("run " + quote(write("n.yaml", std::string("name: ") + name + "\n" + body)),
                        "n.yaml:1:7: error: a control character (");
  expect_refused_fast("run " + quote(write("n.yaml", std::string("name: \"two\\nlines\"\n") + body)),
                      "n.yaml:1:7: error: name holds a control character, expected printable text");
  // Any value, as its escapes decode it: an escape sequence in a GPU's name reached the
  // table's cluster line; YAML's \N came out as a lone 0x85 byte, not UTF-8.
  expect_refused_fast("run " + quote(write("g.yaml",
                                           "cluster: {preset: dgx-h100, nodes: 1, gpu_spec: {name: "
                                           "\"g\\x1b[31m\"}}\nmodel: {preset: gpt3-1.3b, layers: 2}\n")),
                      "g.yaml:1:56: error: a control character (0x1B) in a value, expected printable text");
  expect_refused_fast("run " + quote(write("l.yaml", std::string("name: \"m\\N\"\n") + body)), "l.yaml:1:7: error:");
  EXPECT_EQ(cli("run " + quote(write("ok.yaml", "name: \"caf\u00e9 run 2\"\n" + body)), 20).code, 0);
}

// A calibration profile that calibrates nothing (an empty file, a file of other keys) is
// refused, not run on the built-in defaults; a FIFO in its place is named as a profile.
TEST_F(HostileTest, AProfileThatCalibratesNothingIsRefused) {
  const std::string base = "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n";
  write("empty.yaml", "");
  expect_refused_fast("run " + quote(write("e.yaml", base + "calibration: empty.yaml\n")),
                      "empty.yaml:1:1: error: the calibration profile calibrates nothing");
  write("gpu.yaml", "gpu: h100-sxm\ndate: 2026-01-01\n");
  expect_refused_fast("run " + quote(write("g.yaml", base + "calibration: gpu.yaml\n")),
                      "the calibration profile calibrates nothing, expected compute: or network:");
  write("blocks.yaml", "gpu: h100-sxm\ncompute: {}\nnetwork: {}\n");
  expect_refused_fast("run " + quote(write("b.yaml", base + "calibration: blocks.yaml\n")),
                      "the calibration profile calibrates nothing");
  write("typo.yaml", "computee: {gemm_efficiency: 0.5}\n");
  expect_refused_fast("run " + quote(write("t.yaml", base + "calibration: typo.yaml\n")), "computee");
  const std::string fifo = (dir_ / "f.fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_refused_fast("run " + quote(write("f.yaml", base + "calibration: f.fifo\n")),
                      "is not a regular file, expected a YAML calibration profile");
}

// A calibration profile's tables: whole dimensions, each shape once, and times no chip
// reaches refused at their row; a range is printed as written (not 0.000000).
TEST_F(HostileTest, ProfileTablesAreCheckedRowByRow) {
  auto check = [&](const std::string& name, const std::string& table, const std::string& phrase) {
    expect_refused_fast("profile-check " + quote(write(name, "compute:\n" + table)), phrase);
  };
  check("a.yaml", "  gemm_table:\n    - [bf16, 64.5, 64, 64, 1e-5]\n",
        "a.yaml:3:14: error: profile.compute.gemm_table: "
        "a dimension must be a whole number, got '64.5'");
  check("b.yaml", "  gemm_table:\n    - [bf16, 64, 64, 64, 1e-5]\n    - [bf16, 64, 64, 64, 2e-5]\n",
        "b.yaml:4:7: error: profile.compute.gemm_table: this row's shape is listed twice");
  check("c.yaml", "  gemm_table:\n    - [bf16, 1000000, 1000000, 1000000, 5e-6]\n", "implies 4e+23 FLOP/s, past 1e+18");
  check("d.yaml", "  memory_table:\n    - [1073741824, 1e-9]\n", "implies 1.07e+18 bytes/s, past 1e+15");
  check("e.yaml", "  gemm_table:\n    - [bf16, 0, 64, 64, 1e-5]\n", "must be a number in [1, 2.14748e+09], got '0'");
  // Times and efficiencies that would run a step past the simulated clock: refused at their
  // row, not found as an overflow with no place named.
  check("f.yaml", "  gemm_table:\n    - [bf16, 64, 64, 64, 1e5]\n",
        "f.yaml:3:26: error: profile.compute.gemm_table must be a number in [1e-12, 1], got '1e5'");
  check("g.yaml", "  gemm_efficiency: 1e-6\n", "profile.compute.gemm_efficiency must be a number in [0.01, 1]");
  expect_refused_fast("profile-check " + quote(write("h.yaml",
                                                     "network:\n  collective_table:\n"
                                                     "    - [all-reduce, nccl, auto, 2, 1e-5, 1e6, 0.01]\n")),
                      "profile.network.collective_table must be a number in [0, 1e-06], got '1e6'");
  // A series is named as the model looks it up, once, over a whole number of ranks: a
  // misspelt name had left its measurements unused, a second row had lost to the first.
  const std::string row = "    - [all-reduce, nccl, auto, 2, 1e-5, 1e-12, 0.01]\n";
  expect_refused_fast("profile-check " + quote(write("i.yaml", "network:\n  collective_table:\n" + row + row)),
                      "i.yaml:4:7: error: profile.network.collective_table: this row's series (all-reduce, nccl, auto, "
                      "2 ranks) is listed twice");
  expect_refused_fast("profile-check " + quote(write("j.yaml",
                                                     "network:\n  collective_table:\n"
                                                     "    - [allreduce, nccl, auto, 2, 1e-5, 1e-12, 0.01]\n")),
                      "unknown operation 'allreduce'");
  expect_refused_fast("profile-check " + quote(write("k.yaml",
                                                     "network:\n  collective_points:\n"
                                                     "    - [all-reduce, nccl, auto, 2.9, 1024, 1e-5]\n")),
                      "ranks must be a whole number, got '2.9'");
}

// One file reached by two names (a link beside its target) is one accuracy case.
TEST_F(HostileTest, AccuracyCountsALinkedFileOnce) {
  std::filesystem::create_directories(dir_ / "acc");
  write("acc/case.yaml",
        "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
        "reference: {metric: iteration_time_s, value: 1, unit: s, source: \"a measurement\"}\n");
  std::filesystem::create_symlink("case.yaml", dir_ / "acc" / "alias.yaml");
  const CliResult r = cli("accuracy " + quote((dir_ / "acc").string()), 60);
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_NE(r.out.find("1 cases"), std::string::npos) << r;
}

// A serving run's report has no ranks, stages or streams: asking for them is an error, not
// a report that ignores them.
TEST_F(HostileTest, AServingReportRefusesATimelineSelection) {
  const std::string db = (dir_ / "sv.sqlite").string();
  const std::string f = write("sv.yaml",
                              "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b}\n"
                              "inference: {requests: 5}\noutput: {sqlite: " +
                                  db + "}\n");
  ASSERT_EQ(cli("run " + quote(f), 30).code, 0);
  expect_refused_fast("report " + quote(db) + " --html " + quote((dir_ / "r.html").string()) + " --ranks 99",
                      "--ranks: error: run 1 is a serving run");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "r.html"));
}

// ---- class 4: accepted, then unbounded ----------------------------------------------------

TEST_F(HostileTest, AYamlAliasBombIsRefusedAtOnce) {
  std::string y = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 10; ++i) {
    y += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) y += (k ? ", *a" : "*a") + std::to_string(i - 1);
    y += "]\n";
  }
  expect_refused_fast("run " + quote(write("bomb.yaml", y + "model: *a9\n")), "YAML aliases");
}

TEST_F(HostileTest, AYamlAliasInsideItsOwnAnchorIsRefused) {
  // The alias makes the node graph a cycle: refused at the alias, not followed forever.
  expect_refused_fast("run " + quote(write("cycle.yaml",
                                           "cluster: &c {preset: dgx-h100, x: *c}\n"
                                           "model: {preset: gpt3-1.3b}\n")),
                      "cycle.yaml:1:10: error: a YAML alias refers to an anchor that contains it");
  expect_refused_fast("run " + small() + " --set 'name=&a [*a]'", "an anchor that contains it");
  std::string deep = "model: " + std::string(300, '[') + std::string(300, ']');
  expect_refused_fast("run " + quote(write("deep.yaml", deep + "\n")), "nested more than 256 deep");
}

TEST_F(HostileTest, IncludesThatIncludeTheNextTwiceLoadEachFileOnce) {
  for (int i = 0; i < 31; ++i) {
    const std::string next = "f" + std::to_string(i + 1) + ".yaml";
    write("f" + std::to_string(i) + ".yaml",
          "include: [" + next + ", " + next + "]\nseed: " + std::to_string(i) + "\n");
  }
  write("f31.yaml", "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n");
  double s = 0;
  const CliResult r = timed("run " + quote((dir_ / "f0.yaml").string()) + " --json", s);
  EXPECT_EQ(r.code, 0) << r;
  EXPECT_LT(s, 5.0);
}

TEST_F(HostileTest, BudgetsAreRefusedBeforeAnyWork) {
  std::string sweep = "sweep:\n  seed: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n  training.iterations: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n"
                      "  parallel.micro_batch: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n  parallel.bucket_size: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n"
                      "  parallel.tp: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n  parallel.pp: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n";
  const std::string s = write("sw.yaml", "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n" + sweep);
  expect_refused_fast("sweep " + quote(s), "points (the budget of one sweep");
  expect_refused_fast("run " + quote(small()) + " --set cluster.nodes=1000000", "budget of 1048576 GPUs");
  expect_refused_fast("run " + quote(small()) + " --set parallel.tp=1 --set training.global_batch=1048576",
                      "budget of 65536");
  const std::string serve = write("i.yaml", "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b}\n"
                                            "inference: {requests: 67000000}\n");
  expect_refused_fast("run " + quote(serve), "budget of 10000000 requests");
  const std::string tokens = write("t.yaml", "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b, seq_len: 1000000}\n"
                                             "inference: {requests: 100000, output_tokens: {dist: fixed, value: 200000}}\n");
  expect_refused_fast("run " + quote(tokens), "past the budget of 1e10");
  expect_refused_fast("run " + quote(small()) + " --set model.layers=96 --set parallel.tp=1 --set parallel.micro_batch=1 "
                                                "--set training.global_batch=65536",
                      "layer passes per stage");
  expect_refused_fast("collective --op all-reduce --gpus 8 --cluster dgx-h100 --concurrent 1000000", "budget of 1048576");
  // A node's GPUs are wired all to all and its NICs each to the fabric: both bounded.
  expect_refused_fast("run " + quote(small()) +
                          " --set cluster.gpus_per_node=65536 --set parallel.tp=1 "
                          "--set parallel.dp=65536",
                      "budget of 4096 GPUs a node");
  expect_refused_fast("run " + quote(small()) +
                          " --set cluster.nodes=2 --set parallel.dp=2 "
                          "--set cluster.scale_out.nics_per_node=1048576",
                      "budget of 64 NICs a node");
  // A topology file's every node build, not its first alone (a second of a million NICs had
  // run, and three of them past a minute and 2.7 GB).
  write("tn.yaml",
        "nodes:\n  - {preset: dgx-h100, count: 1}\n  - {preset: dgx-h100, count: 1, nics: 1000000}\n"
        "fabric: {topology: fat-tree}\n");
  expect_refused_fast("run " + quote(write("tns.yaml",
                                           "cluster: {topology_file: tn.yaml}\n"
                                           "model: {preset: gpt3-1.3b, layers: 2}\n")),
                      "the topology file's node 1 has 8 GPUs and 1000000 NICs, past the budget");
  // --allow-large lifts a budget, never the ceiling past it.
  expect_refused_fast("run " + quote(small()) + " --allow-large --set cluster.nodes=1000000 --set cluster.gpus_per_node=1000",
                      "the most any run takes");
  expect_refused_fast("collective --op all-reduce --gpus 64 --cluster dgx-h100 --concurrent 1000000 --allow-large",
                      "budget of 16777216");
  const std::string gamma = write("g.yaml", "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b}\n"
                                            "inference: {requests: 10, arrivals: {process: gamma, cv: 1e-300}}\n");
  expect_refused_fast("run " + quote(gamma), "expected 0.001 to 1000");
}

// Found by fuzzing whole runs: yaml-cpp's LoadAll never returns on ", x"; one document
// is read with Load and a second one found by its marker line.
TEST_F(HostileTest, AMalformedSetValueFailsInsteadOfHanging) {
  expect_refused_fast("run " + quote(small()) + " --set 'seed=, x'", "error:");
}

// ---- class 5: messages ----------------------------------------------------------------------

// A budget is lifted by --allow-large: the same micro-batch count then runs.
TEST_F(HostileTest, AllowLargeRunsPastABudget) {
  const std::string s = write("mb.yaml", "cluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1}\n"
                                         "model: {preset: gpt3-1.3b, layers: 1, seq_len: 128, vocab: 512}\n"
                                         "training: {global_batch: 70000}\n");
  expect_refused_fast("plan " + quote(s), "--allow-large runs it anyway");
  EXPECT_EQ(cli("plan " + quote(s) + " --allow-large --out " + quote((dir_ / "p.json").string())).code, 0);
}

TEST_F(HostileTest, ASecondYamlDocumentIsAnError) {
  const std::string s = write("two.yaml", "cluster: {preset: dgx-h100}\n---\nmodel: {preset: gpt3-1.3b}\n");
  expect_refused_fast("run " + quote(s), "a second YAML document");
  // Behind an empty first document (or one that is only `~`) the second was dropped: an
  // included file's keys were lost without a word, a main file's said `cluster.preset is required`.
  for (const char* opening : {"---\n---\n", "--- ~\n---\n"}) {
    const std::string inc = write("empty-first.yaml", std::string(opening) + "training: {global_batch: 64}\n");
    const std::string main = write("main.yaml",
                                   "include: [empty-first.yaml]\ncluster: {preset: dgx-h100, nodes: 1}\n"
                                   "model: {preset: gpt3-1.3b, layers: 2}\n");
    const CliResult r = cli("run " + quote(main));
    EXPECT_EQ(r.code, 1) << opening << r;
    EXPECT_NE(r.err.find("empty-first.yaml:2:1: error: a second YAML document"), std::string::npos) << opening << r;
  }
  // A %YAML directive heads the one document: read, not taken for a second.
  const std::string d = write("directive.yaml",
                              "%YAML 1.2\n---\ncluster: {preset: dgx-h100, nodes: 1}\n"
                              "model: {preset: gpt3-1.3b, layers: 2}\n");
  EXPECT_EQ(cli("run " + quote(d)).code, 0);
}

TEST_F(HostileTest, AnIncludedFileThatIsNotAScenarioIsNotEchoed) {
  write("secret.txt", "s3cr3t-token: abc\n");
  const std::string s = write("inc.yaml", "include: [secret.txt]\ncluster: {preset: dgx-h100}\n"
                                          "model: {preset: gpt3-1.3b}\n");
  double t = 0;
  const CliResult r = timed("run " + quote(s), t);
  EXPECT_EQ(r.code, 1) << r;
  EXPECT_EQ(r.err.find("s3cr3t"), std::string::npos) << r;
  EXPECT_NE(r.err.find("included file 'secret.txt' is not a scenario"), std::string::npos) << r;
}

TEST_F(HostileTest, AHugeValueIsNotEchoedWhole) {
  const std::string s = write("big.yaml", "cluster: {preset: '" + std::string(5'000'000, 'x') + "'}\n");
  double t = 0;
  const CliResult r = timed("run " + quote(s), t);
  EXPECT_EQ(r.code, 1);
  EXPECT_LT(r.err.size(), 2000u);
  EXPECT_NE(r.err.find("(5000000 bytes)"), std::string::npos) << r.err.substr(0, 500);
}

// A path from --set is the working folder's, one written in a file is its folder's; neither
// falls back to the other, and the message names the path as resolved, once.
TEST_F(HostileTest, APathIsReadWhereItsKeyWasWritten) {
  const std::string body = "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n";
  write("sub/s.yaml", body);
  write("sub/prof.yaml", "gpu: h100-sxm\ncompute: {launch_overhead: 2us}\n");
  const CliResult set = cli("run sub/s.yaml --set output=null --set calibration=prof.yaml");
  EXPECT_EQ(set.code, 1) << set;
  EXPECT_NE(set.err.find("calibration profile 'prof.yaml' does not exist"), std::string::npos) << set;
  EXPECT_EQ(cli("run sub/s.yaml --set output=null --set calibration=sub/prof.yaml").code, 0);
  write("sub/c.yaml", body + "calibration: nothere.yaml\n");
  const CliResult file = cli("run sub/c.yaml --set output=null");
  EXPECT_EQ(file.code, 1) << file;
  EXPECT_NE(file.err.find("'sub/nothere.yaml' does not exist"), std::string::npos) << file;
}

TEST_F(HostileTest, ADamagedDatabaseIsSaidToBeDamaged) {
  write("bad.sqlite", std::string(8192, '\x5a'));
  double t = 0;
  // Read by report, it is bad input (exit 1); named as run's database, bad input too, before
  // any work (it had failed at the end of the run, exit 3).
  const CliResult r = timed("report bad.sqlite --html out.html", t);
  EXPECT_EQ(r.code, 1) << r;
  EXPECT_NE(r.err.find("is damaged or not a SQLite database"), std::string::npos) << r;
  EXPECT_FALSE(fs::exists(dir_ / "out.html"));
  // A run the database does not hold is bad input too, at --run.
  ASSERT_EQ(cli("run " + quote(small()) + " --set output.sqlite=good.sqlite").code, 0);
  const CliResult missing = timed("report good.sqlite --html out.html --run 99", t);
  EXPECT_EQ(missing.code, 1) << missing;
  EXPECT_NE(missing.err.find("--run: error: no complete run 99"), std::string::npos) << missing;
  EXPECT_FALSE(fs::exists(dir_ / "out.html"));
  const CliResult w = timed("run " + quote(small()) + " --set output.sqlite=bad.sqlite", t);
  EXPECT_EQ(w.code, 1) << w;
  EXPECT_NE(w.err.find("exists and is not a SQLite database"), std::string::npos) << w;
  EXPECT_EQ(read_file(dir_ / "bad.sqlite"), std::string(8192, '\x5a'));
}

TEST_F(HostileTest, ABogusRankByIsRefusedBeforeTheSweepRuns) {
  const std::string s = write("sw.yaml", "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
                                         "sweep: {parallel.tp: [1, 2, 4, 8], parallel.micro_batch: [1, 2]}\n");
  const std::string db = (dir_ / "r.sqlite").string();
  double t = 0;
  const CliResult r = timed("sweep " + quote(s) + " --out " + quote(db) + " --rank-by bogus", t);
  EXPECT_EQ(r.code, 1) << r;
  EXPECT_NE(r.err.find("no metric 'bogus'"), std::string::npos) << r;
  EXPECT_LT(t, 5.0);
  EXPECT_TRUE(r.out.empty()) << r;
  EXPECT_FALSE(std::filesystem::exists(db)) << "a refused sweep leaves no database";
  // Resumed whole, no point runs: the stored results are checked instead.
  ASSERT_EQ(cli("sweep " + quote(s) + " --out " + quote(db)).code, 0);
  const CliResult resumed = timed("sweep " + quote(s) + " --out " + quote(db) + " --rank-by bogus", t);
  EXPECT_EQ(resumed.code, 1) << resumed;
  EXPECT_NE(resumed.err.find("no metric 'bogus'"), std::string::npos) << resumed;
}

TEST_F(HostileTest, ASetKeyWithAnEmptyPartListsTheKeys) {
  expect_refused_fast("run " + quote(small()) + " --set a..b=1", "top-level keys: name, include, seed, cluster");
}

TEST_F(HostileTest, KeysThatWouldBeIgnoredAreErrors) {
  const std::string both = write("b.yaml", "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b}\n"
                                           "training: {global_batch: 8}\ninference: {requests: 4}\n");
  expect_refused_fast("run " + quote(both), "a training: block beside inference: is not used");
  const std::string moe = write("d.yaml", "cluster: {preset: dgx-h100, nodes: 1}\n"
                                          "model: {preset: mixtral-8x7b, layers: 4, moe: {dense_layers: 9}}\n");
  expect_refused_fast("run " + quote(moe), "is past model.layers");
  const std::string longp = write("p.yaml", "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b}\n"
                                            "inference: {requests: 4, prompt_tokens: {dist: fixed, value: 100000}}\n");
  expect_refused_fast("run " + quote(longp), "past model.seq_len");
  // NVLink into a switch, on a node whose GPUs link pairwise (MI300X's mesh): ignored before.
  expect_run_refused("m.yaml",
                     "cluster: {preset: mi300x-8gpu, nodes: 1, gpu_spec: {nvlink_bandwidth: 100GB/s}}\n"
                     "model: {preset: llama3-8b, layers: 2}\n",
                     "m.yaml:1:71: error: node mi300x-8gpu has no NVSwitch");
  // Userbuffers' SMs past the GPU's own: the GEMM beside them had been clamped to run anyway.
  // On Hopper each block takes a pair of SMs from the GEMM: half of them leave it none (66
  // to 131 had run at one plateau of a slowdown).
  expect_run_refused("u.yaml",
                     "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b, layers: 2}\n"
                     "parallel: {tp: 8, sequence_parallel: true, tp_comm_overlap: true, tp_overlap_fc2_sms: 1000}\n",
                     "u.yaml:3:87: error: parallel.tp_overlap_fc2_sms is 1000, expected fewer than 66 on a h100-sxm "
                     "(132 SMs, its GEMMs in pairs of them");
  expect_run_refused("u66.yaml",
                     "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b, layers: 2}\n"
                     "parallel: {tp: 8, sequence_parallel: true, tp_comm_overlap: true, tp_overlap_fc2_sms: 66}\n",
                     "tp_overlap_fc2_sms is 66, expected fewer than 66");
  const std::string range = write("r.yaml",
                                  "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b}\n"
                                  "inference: {requests: 4, prompt_tokens: {dist: uniform, min: 300, max: 200}}\n");
  expect_refused_fast("run " + quote(range), "inference.prompt_tokens.min = 300 is past its max = 200");
  // Training runs a floating-point recipe; FP8 needs FP8 tensor cores.
  expect_refused_fast("run " + quote(small()) + " --set model.dtype=int4", "training in int4 is not a recipe");
  const std::string a100 =
      write("a.yaml", "cluster: {preset: dgx-a100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n");
  expect_refused_fast("run " + quote(a100) + " --set model.dtype=fp8", "FP8 training needs FP8 tensor cores");
  // What selects a trace needs the trace; a plan written to '' would go to stdout.
  expect_refused_fast("run " + quote(small()) + " --set 'output.trace_ranks=[0]'", "expected output.trace too");
  expect_refused_fast("plan " + quote(small()) + " --out ''", "--out: error: expected a file name");
  for (const char* cmd : {"keys extra", "--version extra"}) {
    const CliResult r = cli(cmd);
    EXPECT_EQ(r.code, 2) << cmd << "\n" << r;
    EXPECT_NE(r.err.find("takes no arguments"), std::string::npos) << r;
  }
  // A job's own fabric, profile, collectives or outputs: the shared cluster's are what run.
  const std::string job_body =
      "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
      "training: {global_batch: 8}\n";
  const std::string jobs = "cluster: {preset: dgx-h100, nodes: 2}\njobs:\n  - {scenario: j.yaml, first_node: 0}\n";
  for (const char* extra : {"collectives: {algorithm: tree}\n", "calibration: ../p.yaml\n",
                            "output: {sqlite: j.sqlite}\n", "network_model: flow\n"}) {
    write("j.yaml", job_body + extra);
    expect_refused_fast("run " + quote(write("jobs.yaml", jobs)), "j.yaml:4:");
  }
  write("j.yaml",
        "cluster: {preset: dgx-h100, nodes: 1, gpu_spec: {hbm: 40GB}}\n" + job_body.substr(job_body.find('\n') + 1));
  expect_refused_fast("run " + quote(write("jobs.yaml", jobs)), "cluster.gpu_spec in job j.yaml");
  expect_refused_fast("search " + quote(write("jobs.yaml", jobs)), "search finds one training job's layout");
  // A workload of Chakra traces takes of training: only its count and duration.
  ASSERT_EQ(cli("export-chakra " + quote(write("c.yaml", job_body)) + " --out ch", 30).code, 0);
  const std::string chakra = "cluster: {preset: dgx-h100, nodes: 1}\nworkload: {chakra: ch}\n";
  expect_refused_fast("run " + quote(write("w.yaml", chakra + "training: {global_batch: 999}\n")),
                      "w.yaml:3:26: error: training.global_batch does not go with workload.chakra");
  const CliResult traced_run = cli("run " + quote(write("w2.yaml", chakra + "training: {iterations: 2}\n")), 30);
  EXPECT_EQ(traced_run.code, 0) << traced_run;
  // Its layout is the traces', not the importer's placeholder (dp = ranks, global batch 0).
  EXPECT_NE(traced_run.out.find("layout          the traces' own"), std::string::npos) << traced_run;
  const CliResult traced_json = cli("run " + quote(write("w2.yaml", chakra)) + " --json", 30);
  EXPECT_EQ(traced_json.out.find("\"dp\":"), std::string::npos) << traced_json;
  EXPECT_EQ(traced_json.out.find("\"global_batch\":"), std::string::npos) << traced_json;
  expect_refused_fast("search " + quote(write("w3.yaml", chakra)), "workload.chakra's traces fix theirs");
  // A serving replica is parallel.tp x parallel.pp: the training layout's keys are refused.
  const std::string serve =
      "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b}\n"
      "inference: {requests: 4}\n";
  for (const char* key : {"dp=2", "zero_stage=3", "sequence_parallel=true", "micro_batch=4"})
    expect_refused_fast("run " + quote(write("sv.yaml", serve)) + " --set parallel." + key,
                        "lays out training, and a serving replica is parallel.tp x parallel.pp");
  // Arrival keys the arrivals would not use.
  write("t.csv", "0,100,10\n1,100,10\n");
  const std::string traced =
      "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b}\n"
      "inference: {requests: 2, arrivals: {trace: t.csv}}\n";
  expect_refused_fast("run " + quote(write("tr.yaml", traced)) + " --set inference.arrivals.rate_per_s=100",
                      "inference.arrivals.rate_per_s would not be used: inference.arrivals.trace gives");
  expect_refused_fast("run " + quote(write("tr.yaml", traced)) + " --set inference.prompt_tokens.value=5",
                      "inference.prompt_tokens would not be used: inference.arrivals.trace gives");
  expect_refused_fast("run " + quote(write("sv.yaml", serve)) +
                          " --set inference.arrivals.process=closed --set inference.arrivals.rate_per_s=3",
                      "a closed loop sends each request when the client's last one ends");
  expect_refused_fast("run " + quote(write("sv.yaml", serve)) + " --set inference.arrivals.cv=2",
                      "only gamma gaps have a coefficient of variation");
  expect_refused_fast("run " + quote(write("sv.yaml", serve)) + " --set inference.arrivals.concurrency=4",
                      "only a closed loop has clients");
  // A scheduler's limit it does not use, swap space without swapping, and a length's
  // parameter its distribution does not take.
  expect_refused_fast(
      "run " + quote(write("sv.yaml", serve)) + " --set inference.scheduler=orca --set inference.max_batch_tokens=4096",
      "inference.max_batch_tokens would not be used: orca batches whole requests by count");
  expect_refused_fast("run " + quote(write("sv.yaml", serve)) + " --set inference.swap_space=8GiB",
                      "inference.swap_space would not be used: only swap preemption moves");
  for (const auto& [dist, key] : {std::pair{"uniform", "mean"},
                                  {"uniform", "value"},
                                  {"lognormal", "alpha"},
                                  {"zipf", "sigma"},
                                  {"fixed", "max"}})
    expect_refused_fast(
        "run " + quote(write("sv.yaml", serve)) + " --set inference.output_tokens.dist=" + dist +
            " --set inference.output_tokens." + key + "=2",
        std::string("inference.output_tokens.") + key + " would not be used: a " + dist + " length has no " + key);
  EXPECT_EQ(cli("run " + quote(write("sv.yaml", serve)) +
                " --set inference.output_tokens.dist=lognormal --set inference.output_tokens.mean=64 "
                "--set inference.output_tokens.min=8 --set inference.output_tokens.max=128")
                .code,
            0);
  expect_refused_fast("plan " + quote(write("jobs.yaml", jobs)), "plan writes one training scenario's plan");
  // A spread without its distribution, and one straggler named twice.
  expect_refused_fast("run " + quote(small()) + " --set variability.gpu_speed.sigma=0.1",
                      "variability.gpu_speed.sigma would not be used: dist is none");
  expect_refused_fast("run " + quote(small()) +
                          " --set 'variability.stragglers=[{gpu: 3, slowdown: 2}, {gpu: 3, "
                          "slowdown: 3}]'",
                      "variability.stragglers names this gpu twice");
  // plan, export-chakra and search say that a sweep: block is not theirs.
  const CliResult planned = cli("plan " + quote(write("sw.yaml", job_body + "sweep: {parallel.tp: [1, 2]}\n")), 30);
  EXPECT_EQ(planned.code, 0) << planned;
  EXPECT_NE(planned.err.find("sw.yaml:4:8: warning: plan writes the scenario as written"), std::string::npos)
      << planned;
}

// Scenario files are UTF-8: a stray byte is refused at its line and column, not passed into
// names and the outputs' JSON.
TEST_F(HostileTest, AByteThatIsNotUtf8IsRefusedWhereItIs) {
  const std::string s = write("u.yaml",
                              "cluster: {preset: dgx-h100, nodes: 1}\nname: ab\xff\xfe\n"
                              "model: {preset: gpt3-1.3b, layers: 2}\n");
  expect_refused_fast("run " + quote(s) + " --json", "u.yaml:2:9: error: a byte that is not UTF-8 text (0xFF)");
  // A NUL (or another control character YAML leaves out) is refused where it stands: the
  // parser alone read it as an escape two columns on.
  const std::string nul =
      write("n.yaml", std::string("cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b") + '\0' + "}\n");
  expect_refused_fast("run " + quote(nul), "n.yaml:2:26: error: a control character (0x00) that YAML does not allow");
  const std::string del = write("d.yaml", "cluster: {preset: dgx-h100, nodes: 1}\nname: a\x7f\n");
  expect_refused_fast("run " + quote(del), "d.yaml:2:8: error: a control character (0x7F)");
  const std::string ok = write("v.yaml",
                               "cluster: {preset: dgx-h100, nodes: 1}\nname: \"caf\xc3\xa9 \xe2\x9c\x93\"\n"
                               "model: {preset: gpt3-1.3b, layers: 2}\n");
  EXPECT_EQ(cli("run " + quote(ok) + " --json").code, 0);
}

// Failures drawn one by one, arrivals in double seconds: a run that would draw 10^9 failures
// or span past 1e9 s is refused before any work; a length draw past int64 clips to its max.
TEST_F(HostileTest, FailureCountsAndTimeSpansPastTheirRangeAreRefused) {
  const std::string f = write("f.yaml",
                              "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
                              "faults: {gpu_mtbf: 1ms, restart: 10min, checkpoint_bandwidth: 100GB/s}\n"
                              "training: {duration: 24h}\n");
  expect_refused_fast("run " + quote(f), "failures (training.duration over the system's MTBF");
  expect_refused_fast("run " + quote(f) + " --set faults.gpu_mtbf=10s --set training.duration=10000h",
                      "past the budget of 1e7 (--allow-large runs it anyway)");
  const std::string serve = "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b}\n";
  const std::string slow = write("s.yaml", serve + "inference: {requests: 10, arrivals: {rate_per_s: 1e-300}}\n");
  expect_refused_fast("run " + quote(slow), "past 1e9 s");
  write("t.csv", "arrival_s,prompt_tokens,output_tokens\n1e308,100,10\n");
  const std::string trace = write("t.yaml", serve + "inference: {arrivals: {trace: t.csv}}\n");
  expect_refused_fast("run " + quote(trace), "t.csv:2:1: error: bad arrival_s '1e308', expected seconds from 0 to 1e9");
  write("g.csv", "0,100,10,5\n");
  const std::string group = write("g.yaml", serve + "inference: {arrivals: {trace: g.csv}}\n");
  expect_refused_fast("run " + quote(group), "the scenario has no shared_prefix groups");
  write("c.csv", "0,100,10,-1,7\n");
  const std::string cols = write("c.yaml", serve + "inference: {arrivals: {trace: c.csv}}\n");
  expect_refused_fast("run " + quote(cols), "a fifth column '7'");
  // A lognormal's sigma past 10: its sigma² overflowed the mean's correction to -inf, the draws
  // came out NaN, and a run printed a negative throughput with exit 0.
  const std::string wide = write("w.yaml", serve +
                                               "inference: {requests: 20, output_tokens: {dist: lognormal, "
                                               "mean: 100, sigma: 1e308}}\n");
  expect_refused_fast("run " + quote(wide), "w.yaml:3:78: error: inference.output_tokens.sigma must be at most 10");
  const std::string huge = write("h.yaml", serve +
                                               "inference: {requests: 20, output_tokens: {dist: lognormal, mean: 1e20, "
                                               "sigma: 0.6, max: 300}}\n");
  const CliResult r = cli("run " + quote(huge) + " --json", 20);
  ASSERT_EQ(r.code, 0) << r;
  auto number = [&](const std::string& key) {
    const size_t at = r.out.find("\"" + key + "\": ");
    return at == std::string::npos ? -1.0 : std::stod(r.out.substr(at + key.size() + 4));
  };
  // Every draw clipped to 300 output tokens: the tokens a request is 300.
  EXPECT_NEAR(number("throughput_tokens_per_s") / number("requests_per_s"), 300.0, 1e-6) << r;
}

// Messages that name the cause: a --set key's first unknown part, the batch limits that leave
// no room for the KV cache, a second --gpus, one GPU's collective, a document's end marker with
// text after it, and Chakra traces whose process groups need their comm_group.json.
TEST_F(HostileTest, MessagesNameWhatIsWrong) {
  expect_refused_fast("run " + quote(small()) + " --set nonexistent.key=1",
                      "unknown key 'nonexistent', expected one of");
  expect_refused_fast("run " + quote(small()) + " --set sweep.parallel.tp=2",
                      "sweep.parallel.tp must be a non-empty list of values");
  expect_refused_fast("run " + quote(small()) + " --set sweep.nonexistent.key=[1]",
                      "sweep: unknown key 'nonexistent.key'");
  // A YAML merge key is said to be one, not matched against the key names.
  expect_refused_fast("run " + quote(write("merge.yaml",
                                           "base: &b {tp: 8}\ncluster: {preset: dgx-h100, nodes: 1}\n"
                                           "model: {preset: gpt3-1.3b}\nparallel:\n  <<: *b\n")),
                      "merge.yaml:1:1: error: unknown key 'base'");
  expect_refused_fast("run " + quote(write("merge2.yaml",
                                           "cluster: {preset: dgx-h100, nodes: 1}\n"
                                           "model: {preset: gpt3-1.3b}\nparallel:\n  <<: {tp: 8}\n")),
                      "YAML merge keys (<<) are not supported");
  // A run id past int64 is said to be out of range, not read as the largest one: a usage
  // error, as every flag's bad value is (--top 0, --max-spans 0, --refine foo alike).
  EXPECT_EQ(cli("report x.sqlite --html r.html --run 99999999999999999999").code, 2);
  EXPECT_NE(cli("report x.sqlite --html r.html --run 99999999999999999999").err.find("--run expects an integer from 1"),
            std::string::npos);
  for (const char* bad : {"report x.sqlite --html r.html --max-spans 0", "search x.yaml --refine foo"})
    EXPECT_EQ(cli(bad).code, 2) << bad;
  // One node, not "1 nodes".
  expect_refused_fast("run " + quote(small()) + " --set parallel.dp=3", "(1 node × 8)");
  const std::string serve = write("b.yaml",
                                  "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: llama3-8b}\n"
                                  "inference: {requests: 4, max_batch_size: 1000000}\n");
  expect_refused_fast("run " + quote(serve), "b.yaml:3:42: error: no room for the KV cache");
  expect_refused_fast("run " + quote(serve), "expected smaller inference.max_batch_size or max_batch_tokens");
  expect_refused_fast("collective --op all-reduce --gpus 1 --cluster dgx-h100",
                      "a collective over one GPU moves nothing");
  const CliResult twice = cli("collective --op all-reduce --gpus 8 --gpus 16 --cluster dgx-h100", 20);
  EXPECT_EQ(twice.code, 2) << twice;
  EXPECT_NE(twice.err.find("--gpus given twice"), std::string::npos) << twice;
  const std::string end = write("e.yaml",
                                "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
                                "...\nparallel: {tp: 3}\n");
  expect_refused_fast("run " + quote(end), "e.yaml:4:1: error: text after the document's end ('...')");
  const std::string s = write("x.yaml",
                              "name: x\ncluster: {preset: dgx-h100, nodes: 1}\n"
                              "model: {preset: gpt3-1.3b, layers: 2}\nparallel: {tp: 2, dp: 4}\n");
  ASSERT_EQ(cli("export-chakra " + quote(s) + " --out tr").code, 0);
  fs::remove(dir_ / "tr" / "comm_group.json");
  const std::string w = write("w.yaml", "cluster: {preset: dgx-h100, nodes: 1}\nworkload: {chakra: tr}\n");
  expect_refused_fast("run " + quote(w), "and the folder has no comm_group.json");
  write("tr/comm_group.json", "{\"0\": [0, 1\n");
  expect_refused_fast("run " + quote(w), "comm_group.json:2:1: error: not a comm_group.json");
}

// A peak raised alone under the power cap keeps each FLOP's energy: the run says so and runs.
TEST_F(HostileTest, APeakRaisedWithoutItsCappedRateIsWarnedAbout) {
  const CliResult r = cli("run " + quote(small()) + " --set cluster.gpu_spec.bf16_tflops=2000", 20);
  EXPECT_EQ(r.code, 0) << r;
  EXPECT_NE(r.err.find("warning: bf16_tflops is changed but capped_bf16_tflops"), std::string::npos) << r;
  const CliResult both =
      cli("run " + quote(small()) +
              " --set cluster.gpu_spec.bf16_tflops=2000 --set cluster.gpu_spec.capped_bf16_tflops=1300",
          20);
  EXPECT_EQ(both.code, 0) << both;
  EXPECT_EQ(both.err.find("warning"), std::string::npos) << both;
}

// ---- class 6: determinism -------------------------------------------------------------------

// search's result carries no wall-clock time: its bytes are the scenario's (the times go to
// stderr).
TEST_F(HostileTest, TwoIdenticalSearchesPrintTheSameBytes) {
  const std::string s = write("se.yaml",
                              "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
                              "training: {global_batch: 16}\n");
  const CliResult a = cli("search " + quote(s) + " --top 2 --json", 60),
                  b = cli("search " + quote(s) + " --top 2 --json", 60);
  ASSERT_EQ(a.code, 0) << a;
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.out.find("wall"), std::string::npos);
  EXPECT_NE(a.err.find(" estimated in "), std::string::npos) << a;
  EXPECT_NE(a.err.find("simulating 3 op by op (analytic network)"), std::string::npos) << a;
}

TEST_F(HostileTest, TwoIdenticalThreadedSweepsWriteTheSameBytes) {
  const std::string s = write("sw.yaml", "cluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
                                         "sweep: {parallel.tp: [1, 2, 4, 8], parallel.micro_batch: [1, 2, 4]}\n");
  for (const char* db : {"a.sqlite", "b.sqlite"})
    ASSERT_EQ(cli("sweep " + quote(s) + " --jobs 2 --out " + quote((dir_ / db).string())).code, 0);
  EXPECT_EQ(read_file(dir_ / "a.sqlite"), read_file(dir_ / "b.sqlite"));
}

}  // namespace
