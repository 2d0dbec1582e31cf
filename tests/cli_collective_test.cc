// End-to-end tests of `clustersim collective`: every operation and algorithm under both network
// models, NVLS's limits, concurrent groups, and an NVL72 domain against nodes over InfiniBand.
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
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli_harness.h"

namespace {

// A suite of its own: CliTest is a fixture of each translation unit.
using CollectiveCliTest = CliTest;

std::vector<std::string> data_rows(const std::string& out) {
  std::vector<std::string> rows;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != '#') rows.push_back(line);
  return rows;
}

TEST_F(CollectiveCliTest, CollectiveTable) {
  const CliResult r = cli("collective --op all-reduce --gpus 8 --cluster dgx-h100 --min 1MiB --max 16MiB");
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_TRUE(r.err.empty()) << r;
  for (const char* col : {"size", "time", "algbw", "busbw"})
    EXPECT_NE(r.out.find(col), std::string::npos) << col << "\n" << r;
  const auto rows = data_rows(r.out);
  ASSERT_EQ(rows.size(), 5u) << r;
  long long expect_bytes = 1 << 20;
  double prev_time = 0;
  for (const std::string& row : rows) {
    std::istringstream f(row);
    long long bytes = 0, count = 0;
    std::string type, redop;
    double time_us = 0, algbw = 0, busbw = 0;
    ASSERT_TRUE(static_cast<bool>(f >> bytes >> count >> type >> redop >> time_us >> algbw >> busbw)) << row;
    EXPECT_EQ(bytes, expect_bytes) << row;
    EXPECT_EQ(count, bytes / 4) << row;
    EXPECT_EQ(type, "float");
    EXPECT_EQ(redop, "sum");
    EXPECT_GT(time_us, prev_time) << row;
    EXPECT_GT(algbw, 0) << row;
    // Ring all-reduce bus bandwidth: algbw · 2(n-1)/n, printed to two decimals.
    EXPECT_NEAR(busbw, algbw * 2.0 * 7 / 8, 0.02) << row;
    prev_time = time_us;
    expect_bytes *= 2;
  }
}

TEST_F(CollectiveCliTest, CollectiveJson) {
  const CliResult r = cli("collective --op all-reduce --gpus 8 --cluster dgx-h100 --min 1MiB --max 16MiB --json");
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_EQ(r.out.front(), '{') << r;
  size_t n = 0;
  for (size_t at = r.out.find("\"busbw_GBps\""); at != std::string::npos; at = r.out.find("\"busbw_GBps\"", at + 1))
    ++n;
  EXPECT_EQ(n, 5u) << r;
  for (const char* key : {"\"bytes\"", "\"time_s\"", "\"algbw_GBps\""})
    EXPECT_NE(r.out.find(key), std::string::npos) << key;
}

TEST_F(CollectiveCliTest, CollectiveOtherOpsAndNodes) {
  // all-to-all without --algo regressed once: the default must be auto (direct for it).
  for (const char* op :
       {"all-gather", "reduce-scatter", "all-to-all", "all-to-all --algo auto", "all-to-all --algo direct"}) {
    const CliResult r =
        cli(std::string("collective --op ") + op + " --gpus 16 --nodes 2 --cluster dgx-a100 --min 1KiB --max 4KiB");
    EXPECT_EQ(r.code, 0) << op << "\n" << r;
    EXPECT_EQ(data_rows(r.out).size(), 3u) << op << "\n" << r;
  }
}

// Regression: one path for both outputs let the trace overwrite the database.
TEST_F(CollectiveCliTest, SamePathForBothOutputsIsAnError) {
  const std::string same = (dir_ / "same").string();
  const CliResult r = cli("run " + quote(kExample) + " --set " + quote("output.sqlite=" + same) + " --set " +
                          quote("output.trace=" + same));
  EXPECT_EQ(r.code, 1) << r;
  EXPECT_NE(r.err.find("output.trace names the same file as output.sqlite"), std::string::npos) << r;
  EXPECT_FALSE(std::filesystem::exists(same));
}

TEST_F(CollectiveCliTest, CollectiveUnknownOp) {
  const CliResult r = cli("collective --op frobnicate --gpus 8 --cluster dgx-h100");
  EXPECT_EQ(r.code, 1) << r;
  EXPECT_TRUE(starts_with(r.err, "--op: error: unknown operation 'frobnicate'")) << r;
  EXPECT_TRUE(r.out.empty()) << r;
}

TEST_F(CollectiveCliTest, CollectiveGpusNotSplittingOverNodes) {
  const CliResult r = cli("collective --op all-reduce --gpus 12 --nodes 5 --cluster dgx-h100");
  EXPECT_EQ(r.code, 1) << r;
  EXPECT_TRUE(starts_with(r.err, "--gpus: error: ")) << r;
  EXPECT_NE(r.err.find("do not split evenly over 5 nodes"), std::string::npos) << r;
  EXPECT_TRUE(r.out.empty()) << r;
}

TEST_F(CollectiveCliTest, CollectiveTooManyGpusPerNode) {
  const CliResult r = cli("collective --op all-reduce --gpus 16 --nodes 1 --cluster dgx-h100");
  EXPECT_EQ(r.code, 1) << r;
  EXPECT_TRUE(starts_with(r.err, "--gpus: error: ")) << r;
  EXPECT_NE(r.err.find("add --nodes"), std::string::npos) << r;
}

TEST_F(CollectiveCliTest, CollectiveBadValues) {
  struct Case {
    const char* args;
    const char* prefix;
  } cases[] = {
      {"collective --op all-reduce --gpus 0 --cluster dgx-h100", "--gpus: error: "},
      {"collective --op all-reduce --gpus eight --cluster dgx-h100", "--gpus: error: "},
      {"collective --op all-reduce --gpus 8 --cluster dgx-z100", "--cluster: error: unknown cluster preset 'dgx-z100'"},
      {"collective --op all-reduce --gpus 8 --cluster dgx-h100 --min 1parsec", "--min: error: "},
      {"collective --op all-reduce --gpus 8 --cluster dgx-h100 --min 2MiB --max 1MiB",
       "--min: error: --min is larger than --max"},
      {"collective --op all-reduce --gpus 8 --cluster dgx-h100 --min 1 --max 3",
       "--min: error: 1 B is not a whole number of float elements"},
      {"collective --op all-reduce --gpus 8 --cluster dgx-h100 --min 4 --max 6",
       "--max: error: 6 B is not a whole number of float elements"},
      {"collective --op all-reduce --gpus 8 --cluster dgx-h100 --algo telepathy",
       "--algo: error: unknown algorithm 'telepathy'"},
      {"collective --op all-reduce --gpus 8 --nodes 0 --cluster dgx-h100", "--nodes: error: "},
  };
  for (const Case& c : cases) {
    const CliResult r = cli(c.args);
    EXPECT_EQ(r.code, 1) << c.args << "\n" << r;
    EXPECT_TRUE(starts_with(r.err, c.prefix)) << c.args << "\n" << r;
    EXPECT_TRUE(r.out.empty()) << c.args << "\n" << r;
  }
}

// Every operation and every named algorithm that can run it, under both network models.
TEST_F(CollectiveCliTest, CollectiveEveryOperationAlgorithmAndModel) {
  struct Case {
    const char* args;
    const char* algorithm;
  };
  const Case cases[] = {
      {"--op all-reduce --algo ring", "ring"},
      {"--op all-reduce --algo tree", "tree"},
      {"--op all-reduce --algo direct", "direct"},
      {"--op all-reduce --algo halving-doubling", "halving-doubling"},
      {"--op all-reduce --algo hierarchical", "hierarchical"},
      {"--op all-gather --algo ring --proto LL128", "ring"},
      {"--op reduce-scatter --algo hierarchical", "hierarchical"},
      {"--op broadcast --algo ring", "ring"},
      {"--op reduce --algo halving-doubling", "halving-doubling"},
      {"--op all-to-all", "direct"},
      {"--op send-recv", "p2p"},
  };
  for (const char* model : {"analytic", "flow"})
    for (const Case& c : cases) {
      const CliResult r = cli(std::string("collective ") + c.args +
                              " --gpus 16 --nodes 2 --cluster dgx-h100 --min 1MiB --max 4MiB --network-model " + model);
      ASSERT_EQ(r.code, 0) << c.args << " " << model << "\n" << r;
      EXPECT_EQ(data_rows(r.out).size(), 3u) << c.args << "\n" << r;
      EXPECT_NE(r.out.find(c.algorithm), std::string::npos) << c.args << "\n" << r;
      EXPECT_NE(r.out.find(std::string(model) + " network"), std::string::npos) << r;
    }
}

// Inside a node NVLS runs all three operations; across nodes (NCCL's NVLS tree) all-reduce
// only, and only with two or more GPUs of every node; never on a node without it.
TEST_F(CollectiveCliTest, CollectiveNvlsAcrossNodesIsAllReduceOnly) {
  EXPECT_EQ(cli("collective --op all-reduce --algo nvls --gpus 8 --cluster dgx-h100 --min 1MiB --max 1MiB").code, 0);
  EXPECT_EQ(
      cli("collective --op all-reduce --algo nvls --gpus 16 --nodes 2 --cluster dgx-h100 --min 1GiB --max 1GiB").code,
      0);
  const CliResult ag = cli("collective --op all-gather --algo nvls --gpus 16 --nodes 2 --cluster dgx-h100");
  EXPECT_EQ(ag.code, 1) << ag;
  EXPECT_NE(ag.err.find("across nodes in-switch reduction runs all-reduce only"), std::string::npos) << ag;
  const CliResult one = cli("collective --op all-reduce --algo nvls --gpus 4 --nodes 4 --cluster dgx-h100");
  EXPECT_EQ(one.code, 1) << one;
  EXPECT_NE(one.err.find("two or more GPUs in every node"), std::string::npos) << one;
  const CliResult a100 = cli("collective --op all-reduce --algo nvls --gpus 8 --cluster dgx-a100");
  EXPECT_EQ(a100.code, 1) << a100;
  EXPECT_NE(a100.err.find("no in-switch reduction"), std::string::npos) << a100;
}

TEST_F(CollectiveCliTest, CollectiveBadProtocolAndModel) {
  const CliResult p = cli("collective --op all-reduce --gpus 8 --cluster dgx-h100 --proto LL64");
  EXPECT_EQ(p.code, 1) << p;
  EXPECT_TRUE(starts_with(p.err, "--proto: error: unknown protocol 'LL64'")) << p;
  const CliResult m = cli("collective --op all-reduce --gpus 8 --cluster dgx-h100 --network-model packet");
  EXPECT_EQ(m.code, 1) << m;
  EXPECT_TRUE(starts_with(m.err, "--network-model: error:")) << m;
}

// K concurrent groups on an oversubscribed fabric take longer than one group (flow);
// the analytic model, which costs each alone, does not see it.
TEST_F(CollectiveCliTest, CollectiveConcurrentGroupsContendUnderFlow) {
  const std::string base =
      "collective --op all-reduce --algo ring --proto Simple --gpus 16 --cluster dgx-h100 --nodes 16 --min 256MiB "
      "--max 256MiB --json";
  auto time_of = [&](const std::string& extra) {
    const CliResult r = cli(base + extra);
    EXPECT_EQ(r.code, 0) << r;
    return json_field(r.out, "time_s");
  };
  const double one = time_of(" --network-model flow");
  const double eight = time_of(" --network-model flow --concurrent 8");
  EXPECT_NEAR(eight, one, 0.01 * one);  // the default fabric is non-blocking
  // One node per leaf, 2:1 oversubscribed: the eight rings share four up-links per leaf.
  const std::string tight = " --nics-per-leaf 8 --oversubscription 2";
  const double one_tight = time_of(" --network-model flow" + tight);
  const double eight_tight = time_of(" --network-model flow --concurrent 8" + tight);
  EXPECT_NEAR(one_tight, one, 0.01 * one);
  EXPECT_GT(eight_tight, 1.5 * one_tight);
  EXPECT_NEAR(time_of(" --network-model analytic --concurrent 8" + tight), one, 0.01 * one);  // each group alone
  // auto, the default, is a scenario's auto: flow on the oversubscribed fabric, so the
  // contention shows without asking; analytic on the non-blocking one.
  EXPECT_NEAR(time_of(" --concurrent 8" + tight), eight_tight, 1e-9 * eight_tight);
  EXPECT_NE(cli(base + " --concurrent 8" + tight).out.find("\"network_model\": \"flow\""), std::string::npos);
  EXPECT_NE(cli(base + " --concurrent 8").out.find("\"network_model\": \"analytic\""), std::string::npos);
  // The flow network has its own budget of ranks (a minute and 16 GB at 2^20).
  const CliResult big =
      cli("collective --op all-reduce --gpus 131072 --cluster dgx-h100 --min 1GiB --max 1GiB --network-model flow");
  EXPECT_EQ(big.code, 1) << big;
  EXPECT_NE(big.err.find("past its budget of 65536"), std::string::npos) << big;
  // An all-to-all moves a share between every pair: its budget counts those transfers, 4 M
  // on the analytic network (2,048 ranks), 1 M on the flow network; 65,536 ranks (4.3 G
  // transfers) had grown past 24 GB before anything was refused.
  for (const char* line :
       {"--gpus 65536", "--gpus 4096", "--gpus 2048 --network-model flow", "--gpus 64 --concurrent 2048"}) {
    const CliResult a2a =
        cli(std::string("collective --op all-to-all --cluster dgx-a100 --min 1MiB --max 1MiB ") + line);
    EXPECT_EQ(a2a.code, 1) << line << ": " << a2a;
    EXPECT_NE(a2a.err.find("--gpus: error: an all-to-all of "), std::string::npos) << line << ": " << a2a;
  }
  EXPECT_EQ(cli("collective --op all-to-all --gpus 512 --cluster dgx-a100 --min 1MiB --max 1MiB").code, 0);
  // A direct broadcast moves p - 1 shares, not a share between every pair.
  EXPECT_EQ(cli("collective --op broadcast --algo direct --gpus 4096 --cluster dgx-h100 --network-model analytic "
                "--min 4096 --max 4096")
                .code,
            0);
  // A topology file's first GPUs: whole nodes or part of the first, as --cluster takes them;
  // a group ending partway into a later node is refused, not given one NIC's ring.
  const std::string topo = write("two.topology.yaml", "nodes:\n  - {preset: dgx-h100, count: 2}\n");
  for (const char* g : {"4", "8", "16"})
    EXPECT_EQ(cli(std::string("collective --op all-reduce --gpus ") + g + " --topology-file " + quote(topo) +
                  " --min 1MiB --max 1MiB")
                  .code,
              0)
        << g;
  const CliResult partway =
      cli("collective --op all-reduce --gpus 12 --topology-file " + quote(topo) + " --min 1MiB --max 1MiB --json");
  EXPECT_EQ(partway.code, 1) << partway;
  EXPECT_NE(partway.err.find("end partway into node 1"), std::string::npos) << partway;
  const CliResult first = cli("collective --op all-reduce --gpus 8 --topology-file " + quote(topo) + " --json");
  EXPECT_NE(first.out.find("\"nodes\": 1,"), std::string::npos) << first;
  // send-recv is one transfer: an algorithm would be ignored, so it is refused.
  const CliResult algo = cli("collective --op send-recv --gpus 8 --cluster dgx-h100 --algo tree");
  EXPECT_EQ(algo.code, 1) << algo;
  EXPECT_NE(algo.err.find("--algo: error: send-recv is one transfer"), std::string::npos) << algo;
}

// GB200 NVL72 keeps 72 GPUs in one NVLink domain: its all-reduce beats the same 72
// Blackwell GPUs as 9 eight-GPU nodes over InfiniBand. cluster.gpu_spec amends a GPU.
TEST_F(CollectiveCliTest, Nvl72AllReduceBeatsNineNodesOverIbAndGpuSpecAmendsTheGpu) {
  auto time_of = [&](const std::string& args) {
    const CliResult r = cli("collective --op all-reduce " + args + " --min 1GiB --max 1GiB --json");
    EXPECT_EQ(r.code, 0) << r;
    return json_field(r.out, "time_s");
  };
  const double nvl72 = time_of("--cluster dgx-gb200-nvl72 --gpus 72");
  const double ib = time_of("--cluster dgx-b200 --gpus 72 --nodes 9");
  EXPECT_GT(nvl72, 0);
  EXPECT_LT(2 * nvl72, ib);
  const std::string y = write("g.yaml",
                              "cluster: {preset: dgx-h100, nodes: 1, gpu_spec: {name: x1, bf16_tflops: 1500, "
                              "hbm: 144GB}}\nmodel: {preset: llama3-8b, layers: 2}\nparallel: {tp: 8}\n");
  const CliResult base = cli("run " + quote(y) + " --set cluster.gpu_spec.bf16_tflops=989.5 --json");
  const CliResult fast = cli("run " + quote(y) + " --json");
  ASSERT_EQ(base.code, 0) << base;
  ASSERT_EQ(fast.code, 0) << fast;
  EXPECT_GT(json_field(fast.out, "iteration_time_s"), 0);
  EXPECT_LT(json_field(fast.out, "iteration_time_s"), json_field(base.out, "iteration_time_s"));
  const CliResult bad = cli("run " + quote(y) + " --set cluster.gpu_spec.hbm_bandwidth=fast");
  EXPECT_EQ(bad.code, 1) << bad;
  EXPECT_NE(bad.err.find("cluster.gpu_spec.hbm_bandwidth"), std::string::npos) << bad;
}

}  // namespace
