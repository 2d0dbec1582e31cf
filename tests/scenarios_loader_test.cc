// Unit tests of load_scenario: presets and overrides, include merging and its errors,
// --set, and the exact FILE:LINE:COL of every input error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "scenarios/error.h"
#include "scenarios/scenario.h"
#include "scenarios/topology_file.h"
#include "scenarios/yaml_tree.h"

#ifndef CLUSTERSIM_SOURCE_DIR
#define CLUSTERSIM_SOURCE_DIR "."
#endif

namespace clustersim {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test: /tmp/clustersim_loader_<test>_<pid>.
class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path("/tmp") / ("clustersim_loader_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Writes `text` to dir/rel (creating folders) and returns the full path.
  std::string write(const std::string& rel, const std::string& text) {
    fs::path p = dir_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream out(p, std::ios::binary);
    out << text;
    return p.string();
  }

  std::string path(const std::string& rel) const { return (dir_ / rel).string(); }

  fs::path dir_;
};

// The message of the InputError that load_scenario throws, or "" (with a failure).
std::string load_error(const std::string& path, const std::vector<std::string>& sets = {}) {
  try {
    (void)load_scenario(path, sets);
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected InputError, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected InputError for " << path << ", nothing was thrown";
  return "";
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// Asserts the exact "where: error: " prefix and that `phrase` appears in the message.
#define EXPECT_LOAD_ERROR(path_expr, sets_expr, where, phrase)                                                   \
  do {                                                                                                           \
    const std::string msg_ = load_error((path_expr), (sets_expr));                                               \
    const std::string prefix_ = std::string(where) + ": error: ";                                                \
    EXPECT_TRUE(starts_with(msg_, prefix_)) << "message: " << msg_ << "\nexpected prefix: " << prefix_;          \
    EXPECT_NE(msg_.find(phrase), std::string::npos) << "message: " << msg_ << "\nexpected phrase: " << (phrase); \
  } while (0)

const std::vector<std::string> kNoSets;

constexpr const char* kBase =
    "cluster:\n"
    "  preset: dgx-h100\n"
    "  nodes: 1\n"
    "model:\n"
    "  preset: gpt3-1.3b\n"
    "parallel:\n"
    "  tp: 2\n";

// ---- presets and overrides -------------------------------------------------------------

TEST_F(LoaderTest, LoadsMinimalScenarioWithDefaults) {
  const std::string p = write("s.yaml", kBase);
  Scenario s = load_scenario(p);
  EXPECT_EQ(s.path, p);
  EXPECT_EQ(s.name, "s");  // defaults to the file stem
  EXPECT_EQ(s.cluster.node.preset, "dgx-h100");
  EXPECT_EQ(s.cluster.nodes, 1);
  EXPECT_EQ(s.cluster.node.gpus, 8);
  EXPECT_EQ(s.gpus(), 8);
  EXPECT_EQ(s.model.name, "gpt3-1.3b");
  EXPECT_EQ(s.model.layers, 24);
  EXPECT_EQ(s.model.hidden, 2048);
  EXPECT_EQ(s.parallel.tp, 2);
  EXPECT_EQ(s.parallel.dp, 0);
  EXPECT_EQ(s.parallel.pp, 1);
  EXPECT_EQ(s.parallel.schedule, "1f1b");
  EXPECT_EQ(s.algorithm, "auto");
  EXPECT_TRUE(s.output_sqlite.empty());
  EXPECT_FALSE(s.merged_yaml.empty());
}

TEST_F(LoaderTest, FieldsOverridePresetsWrittenAfterThem) {
  const std::string p = write("s.yaml",
                              "cluster:\n"
                              "  preset: dgx-a100\n"
                              "  nodes: 2\n"
                              "  gpus_per_node: 4\n"
                              "  gpu: a100-sxm-40gb\n"
                              "model:\n"
                              "  preset: gpt3-1.3b\n"
                              "  layers: 4\n"
                              "  seq_len: 1024\n");
  Scenario s = load_scenario(p);
  EXPECT_EQ(s.cluster.node.preset, "dgx-a100");
  EXPECT_EQ(s.cluster.nodes, 2);
  EXPECT_EQ(s.cluster.node.gpus, 4);
  EXPECT_EQ(s.cluster.node.gpu.name, "a100-sxm-40gb");
  EXPECT_EQ(s.gpus(), 8);
  EXPECT_EQ(s.model.layers, 4);
  EXPECT_EQ(s.model.seq_len, 1024);
  EXPECT_EQ(s.model.hidden, 2048);  // from the preset
  EXPECT_EQ(s.model.heads, 16);
}

// A GPU's power model comes from its preset, or whole from gpu_spec's power keys; a partial
// one (a limit without the capped rate, or an idle floor above the limit) is refused where
// it was written.
TEST_F(LoaderTest, GpuPowerModelIsWholeOrAbsent) {
  auto text = [](const std::string& cluster_extra) {
    return "cluster:\n  preset: dgx-h100\n  nodes: 1\n" + cluster_extra + "model:\n  preset: gpt3-1.3b\n  layers: 2\n";
  };
  Scenario h100 = load_scenario(write("h100.yaml", text("")));
  EXPECT_EQ(h100.cluster.node.gpu.power_limit_w, 700);
  EXPECT_EQ(h100.cluster.node.gpu.capped_bf16_flops, 660e12);
  EXPECT_TRUE(h100.power_cap);
  Scenario a100 = load_scenario(write("a100.yaml", text("  gpu: a100-sxm-80gb\n")));
  EXPECT_EQ(a100.cluster.node.gpu.power_limit_w, 0);  // no measured power model: burst rates
  Scenario custom = load_scenario(
      write("custom.yaml", text("  gpu_spec:\n    power_limit: 1000\n    capped_bf16_tflops: 1400\n"
                                "    idle_power: 200\n    stream_power: 800\n    fp8_energy_ratio: 0.6\n"
                                "  power_cap: false\n")));
  EXPECT_EQ(custom.cluster.node.gpu.power_limit_w, 1000);
  EXPECT_EQ(custom.cluster.node.gpu.capped_bf16_flops, 1400e12);
  EXPECT_EQ(custom.cluster.node.gpu.fp8_energy_ratio, 0.6);
  EXPECT_FALSE(custom.power_cap);
  const std::string e =
      load_error(write("partial.yaml", text("  gpu_spec:\n    power_limit: 1000\n    capped_bf16_tflops: 0\n")));
  EXPECT_NE(e.find("partial.yaml:5:"), std::string::npos) << e;
  EXPECT_NE(e.find("power model is incomplete"), std::string::npos) << e;
  const std::string idle = load_error(write("idle.yaml", text("  gpu_spec:\n    idle_power: 800\n")));
  EXPECT_NE(idle.find("idle_power < power_limit"), std::string::npos) << idle;
}

TEST_F(LoaderTest, FieldsOverridePresetsWrittenBeforeThem) {
  const std::string p = write("s.yaml",
                              "model:\n"
                              "  layers: 4\n"
                              "  seq_len: 1024\n"
                              "  preset: gpt3-1.3b\n"
                              "cluster:\n"
                              "  gpus_per_node: 4\n"
                              "  gpu: a100-sxm-40gb\n"
                              "  nodes: 2\n"
                              "  preset: dgx-a100\n");
  Scenario s = load_scenario(p);
  EXPECT_EQ(s.cluster.node.preset, "dgx-a100");
  EXPECT_EQ(s.cluster.nodes, 2);
  EXPECT_EQ(s.cluster.node.gpus, 4);
  EXPECT_EQ(s.cluster.node.gpu.name, "a100-sxm-40gb");
  EXPECT_EQ(s.model.name, "gpt3-1.3b");
  EXPECT_EQ(s.model.layers, 4);
  EXPECT_EQ(s.model.seq_len, 1024);
  EXPECT_EQ(s.model.hidden, 2048);
}

TEST_F(LoaderTest, ModelWithoutPresetDefaultsKvHeadsToHeads) {
  const std::string p = write("s.yaml",
                              "cluster: {preset: dgx-h100}\n"
                              "model:\n"
                              "  layers: 2\n"
                              "  hidden: 1536\n"
                              "  heads: 12\n"
                              "  ffn_hidden: 6144\n"
                              "  vocab: 51200\n"
                              "  seq_len: 2048\n");
  Scenario s = load_scenario(p);
  EXPECT_EQ(s.model.name, "custom");
  EXPECT_EQ(s.model.heads, 12);
  EXPECT_EQ(s.model.kv_heads, 12);
}

TEST_F(LoaderTest, UnitsAreParsed) {
  const std::string p = write("s.yaml",
                              "cluster:\n"
                              "  preset: dgx-h100\n"
                              "  scale_out:\n"
                              "    topology: rail-optimized\n"
                              "    latency: 2us\n"
                              "    nic_bandwidth: 400Gbps\n"
                              "model: {preset: gpt3-1.3b}\n");
  Scenario s = load_scenario(p);
  EXPECT_DOUBLE_EQ(s.cluster.fabric.latency, 2e-6);
  EXPECT_DOUBLE_EQ(s.cluster.node.nic_bandwidth, 50e9);
  EXPECT_EQ(s.cluster.fabric.kind, FabricKind::RailOptimized);
}

// ---- include -----------------------------------------------------------------------------

TEST_F(LoaderTest, IncludeMergesAndIncludingFileWins) {
  write("common/base.yaml",
        "name: from-base\n"
        "cluster:\n"
        "  preset: dgx-h100\n"
        "  nodes: 4\n"
        "  scale_out:\n"
        "    latency: 1us\n"
        "    nic_bandwidth: 200Gbps\n"
        "model:\n"
        "  preset: gpt3-1.3b\n"
        "parallel:\n"
        "  tp: 8\n"
        "  micro_batch: 2\n");
  const std::string p = write("main.yaml",
                              "include: [common/base.yaml]\n"
                              "name: from-main\n"
                              "cluster:\n"
                              "  nodes: 2\n"
                              "  scale_out:\n"
                              "    latency: 3us\n"
                              "parallel:\n"
                              "  tp: 4\n");
  Scenario s = load_scenario(p);
  EXPECT_EQ(s.name, "from-main");
  EXPECT_EQ(s.cluster.node.preset, "dgx-h100");          // from the include
  EXPECT_EQ(s.cluster.nodes, 2);                         // this file wins
  EXPECT_DOUBLE_EQ(s.cluster.fabric.latency, 3e-6);      // deep merge: this file wins
  EXPECT_DOUBLE_EQ(s.cluster.node.nic_bandwidth, 25e9);  // deep merge: sibling kept
  EXPECT_EQ(s.model.name, "gpt3-1.3b");
  EXPECT_EQ(s.parallel.tp, 4);
  EXPECT_EQ(s.parallel.micro_batch, 2);
  // The marks know where each value was written.
  EXPECT_EQ(s.mark("cluster.nodes").file, p);
  EXPECT_EQ(s.mark("cluster.nodes").line, 4);
  EXPECT_EQ(s.mark("cluster.preset").file, path("common/base.yaml"));
  EXPECT_EQ(s.mark("cluster.preset").line, 3);
  EXPECT_EQ(s.mark("cluster.preset").column, 11);
  EXPECT_EQ(s.mark("cluster.scale_out.nic_bandwidth").file, path("common/base.yaml"));
  EXPECT_EQ(s.mark("cluster.scale_out.nic_bandwidth").line, 7);
}

TEST_F(LoaderTest, IncludeAsScalarAndInBlockList) {
  write("a.yaml", "cluster: {preset: dgx-a100}\n");
  write("b.yaml", "model: {preset: llama3-8b}\n");
  const std::string p1 = write("one.yaml", "include: a.yaml\nmodel: {preset: gpt3-1.3b}\n");
  Scenario s1 = load_scenario(p1);
  EXPECT_EQ(s1.cluster.node.preset, "dgx-a100");
  EXPECT_EQ(s1.model.name, "gpt3-1.3b");

  const std::string p2 = write("two.yaml", "include:\n  - a.yaml\n  - b.yaml\n");
  Scenario s2 = load_scenario(p2);
  EXPECT_EQ(s2.cluster.node.preset, "dgx-a100");
  EXPECT_EQ(s2.model.name, "llama3-8b");
}

TEST_F(LoaderTest, LaterIncludeWinsOverEarlierOne) {
  write("a.yaml", "cluster: {preset: dgx-a100, nodes: 3}\nmodel: {preset: gpt3-1.3b}\n");
  write("b.yaml", "cluster: {nodes: 5}\n");
  const std::string p = write("main.yaml", "include: [a.yaml, b.yaml]\n");
  Scenario s = load_scenario(p);
  EXPECT_EQ(s.cluster.nodes, 5);
  EXPECT_EQ(s.cluster.node.preset, "dgx-a100");
}

// A block written as null is the block unwritten, as --set KEY=null makes it: a file drops
// the outputs or the faults its include gives. A setting with no value is still an error.
TEST_F(LoaderTest, ABlockWrittenAsNullDropsWhatAnIncludeGave) {
  write("base.yaml",
        "cluster: {preset: dgx-h100}\nmodel: {preset: gpt3-1.3b}\noutput: {sqlite: x.sqlite, trace: x.json}\n"
        "faults: {gpu_mtbf: 1000h, checkpoint_bandwidth: 1GB/s}\ntraining: {duration: 24h}\n");
  const Scenario s = load_scenario(write("main.yaml", "include: [base.yaml]\noutput: null\nfaults: ~\n"));
  EXPECT_TRUE(s.output_sqlite.empty());
  EXPECT_TRUE(s.output_trace.empty());
  EXPECT_FALSE(s.faults.set);
  EXPECT_EQ(s.marks.count("output"), 0u);
  const std::string p = write("tp.yaml", "cluster: {preset: dgx-h100}\nmodel: {preset: gpt3-1.3b}\nparallel: {tp: }\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":3:12", "parallel.tp has no value");
}

TEST_F(LoaderTest, RelativeIncludesResolveAgainstTheIncludingFile) {
  // main.yaml in sub/ includes ../shared/cluster.yaml, which includes models/m.yaml
  // relative to shared/, not to sub/ nor to the working directory.
  write("shared/models/m.yaml", "model:\n  preset: llama3-8b\n  layers: 2\n");
  write("shared/cluster.yaml", "include: [models/m.yaml]\ncluster:\n  preset: dgx-h200\n");
  const std::string p = write("sub/main.yaml", "include: [../shared/cluster.yaml]\nparallel: {tp: 8}\n");
  // Decoys with the same relative name next to the working directory and next to
  // main.yaml must not be used.
  write("sub/models/m.yaml", "model: {preset: gpt3-1.3b}\n");
  write("models/m.yaml", "model: {preset: gpt3-1.3b}\n");
  struct Cwd {
    fs::path saved = fs::current_path();
    ~Cwd() { fs::current_path(saved); }
  } restore;
  fs::current_path(dir_ / "sub");
  Scenario s = load_scenario(p);
  EXPECT_EQ(s.cluster.node.preset, "dgx-h200");
  EXPECT_EQ(s.model.name, "llama3-8b");
  EXPECT_EQ(s.model.layers, 2);
  EXPECT_EQ(s.parallel.tp, 8);
}

TEST_F(LoaderTest, IncludeCycleIsAnErrorAtTheIncludeEntry) {
  write("a.yaml", "name: a\ninclude: [b.yaml]\n");
  write("b.yaml", "name: b\ninclude:\n  - a.yaml\n");
  EXPECT_LOAD_ERROR(path("a.yaml"), kNoSets, path("b.yaml") + ":3:5", "include cycle");
}

TEST_F(LoaderTest, SelfIncludeIsAnIncludeCycle) {
  const std::string p = write("a.yaml", "cluster: {preset: dgx-h100}\ninclude: a.yaml\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":2:10", "include cycle");
}

TEST_F(LoaderTest, MissingIncludeIsAnErrorAtTheIncludeEntry) {
  write("base.yaml", "cluster: {preset: dgx-h100}\n");
  const std::string p = write("main.yaml",
                              "name: x\n"
                              "include:\n"
                              "  - base.yaml\n"
                              "  - nope/missing.yaml\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":4:5", "included file 'nope/missing.yaml' does not exist");
}

TEST_F(LoaderTest, MissingIncludeInFlowListPointsAtTheEntry) {
  const std::string p = write("main.yaml", "include: [missing.yaml]\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":1:11", "does not exist");
}

// Found by fuzzing: an include of a device read forever, a directory read as nothing.
TEST_F(LoaderTest, IncludeOfADeviceOrDirectoryIsAnError) {
  const std::string p = write("main.yaml", "include: [/dev/zero]\nname: x\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":1:11", "'/dev/zero' is not a regular file");
  const std::string d = write("dir.yaml", "include: [" + path("") + "]\nname: x\n");
  EXPECT_LOAD_ERROR(d, kNoSets, d + ":1:11", "is not a regular file");
}

// Found by fuzzing: a name the file system refuses (a component past 255 bytes) threw
// from the existence check instead of being reported.
TEST_F(LoaderTest, IncludeWithANameTooLongIsAnError) {
  const std::string p = write("main.yaml", "include: [" + std::string(300, 'a') + ".yaml]\nname: x\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":1:11", "cannot be opened");
}

TEST_F(LoaderTest, ScenarioThatIsNotARegularFile) { EXPECT_THROW(load_scenario("/dev/zero"), InputError); }

TEST_F(LoaderTest, MissingScenarioFile) {
  const std::string p = path("does-not-exist.yaml");
  EXPECT_LOAD_ERROR(p, kNoSets, p, "cannot read scenario file");
}

TEST_F(LoaderTest, ErrorInIncludedFileReportsItsPathAndLine) {
  write("common/base.yaml",
        "cluster:\n"
        "  preset: dgx-h100\n"
        "  nodes: two\n");
  const std::string p = write("main.yaml", "include: [common/base.yaml]\nmodel: {preset: gpt3-1.3b}\n");
  EXPECT_LOAD_ERROR(p, kNoSets, path("common/base.yaml") + ":3:10", "cluster.nodes must be an integer, got 'two'");
}

TEST_F(LoaderTest, UnknownKeyInIncludedFileReportsItsPathAndLine) {
  write("base.yaml",
        "cluster:\n"
        "  preset: dgx-h100\n"
        "  scale_out:\n"
        "    latncy: 2us\n");
  const std::string p = write("main.yaml", "include: base.yaml\nmodel: {preset: gpt3-1.3b}\n");
  EXPECT_LOAD_ERROR(p, kNoSets, path("base.yaml") + ":4:5",
                    "unknown key 'cluster.scale_out.latncy', did you mean 'latency'?");
}

TEST_F(LoaderTest, MalformedYamlInIncludedFileReportsItsPath) {
  write("base.yaml", "cluster:\n  preset: [dgx-h100\n");
  const std::string p = write("main.yaml", "include: base.yaml\n");
  EXPECT_LOAD_ERROR(p, kNoSets, path("base.yaml") + ":3:1", "malformed YAML: end of sequence flow not found");
}

// ---- --set -------------------------------------------------------------------------------

TEST_F(LoaderTest, SetOverridesAKey) {
  const std::string p = write("s.yaml", kBase);
  Scenario s = load_scenario(p, {"parallel.tp=4"});
  EXPECT_EQ(s.parallel.tp, 4);
  EXPECT_EQ(s.mark("parallel.tp").file, "--set 'parallel.tp=4'");
}

TEST_F(LoaderTest, SetAddsKeysAndBlocksAndAppliesInOrder) {
  const std::string p = write("s.yaml", kBase);
  Scenario s = load_scenario(p, {"parallel.tp=4", "output.sqlite=/x/y.sqlite", "parallel.tp=8",
                                 "cluster.scale_out.latency=5us", "model.preset=llama3-8b"});
  EXPECT_EQ(s.parallel.tp, 8);  // the last --set wins
  EXPECT_EQ(s.output_sqlite, "/x/y.sqlite");
  EXPECT_DOUBLE_EQ(s.cluster.fabric.latency, 5e-6);
  EXPECT_EQ(s.model.name, "llama3-8b");
}

// KEY=null (KEY=~, KEY=) puts a key back to its default, an included one too; sweep.KEY=null
// takes that list out of the sweep. Text that only parses to nothing is still an error.
TEST_F(LoaderTest, SetNullRestoresTheDefault) {
  write("base.yaml", kBase);
  const std::string p = write("main.yaml",
                              "include: [base.yaml]\nparallel: {tp: 4, virtual_stages: 1}\n"
                              "sweep: {parallel.tp: [1, 2], parallel.micro_batch: [1, 2]}\n");
  EXPECT_EQ(load_scenario(p, {"parallel.tp=null"}).parallel.tp, ParallelConfig{}.tp);
  EXPECT_EQ(load_scenario(p, {"parallel.tp=~"}).parallel.tp, ParallelConfig{}.tp);
  // Nothing after '=' is no value (an unset shell variable), not the default.
  EXPECT_LOAD_ERROR(p, std::vector<std::string>{"parallel.tp="}, "--set 'parallel.tp=':1:13",
                    "parallel.tp has no value, expected one after '=' (or null for the default)");
  EXPECT_LOAD_ERROR(p, std::vector<std::string>{"sweep.parallel.tp="}, "--set 'sweep.parallel.tp=':1:19",
                    "has no value");
  // Inside a list the column counts from the --set text, not from the value (it said 1:4).
  EXPECT_LOAD_ERROR(p, std::vector<std::string>{"faults.failures=[1h, 2h, -3h]"},
                    "--set 'faults.failures=[1h, 2h, -3h]':1:26", "is negative");
  EXPECT_LOAD_ERROR(p, std::vector<std::string>{"parallel.tp=[1"}, "--set 'parallel.tp=[1':1:13", "malformed YAML");
  EXPECT_LOAD_ERROR(p, std::vector<std::string>{"parallel.tpp=null"}, "--set 'parallel.tpp=null':1:1",
                    "unknown key 'parallel.tpp', did you mean 'tp'?");
  const Scenario one = load_scenario(p, {"sweep.parallel.tp=null"});
  ASSERT_EQ(one.sweep.size(), 1u);
  EXPECT_EQ(one.sweep[0].first, "parallel.micro_batch");
  EXPECT_TRUE(load_scenario(p, {"sweep.parallel.tp=null", "sweep.parallel.micro_batch=~"}).sweep.empty());
  EXPECT_LOAD_ERROR(p, std::vector<std::string>{"seed=, x"}, "--set 'seed=, x':1:1", "seed has no value");
  // A whole block too: output=null writes no output files.
  const std::string out = write("o.yaml", std::string(kBase) + "output: {sqlite: a.sqlite, trace: a.json}\n");
  const Scenario none = load_scenario(out, {"output=null"});
  EXPECT_TRUE(none.output_sqlite.empty());
  EXPECT_TRUE(none.output_trace.empty());
  EXPECT_LOAD_ERROR(out, std::vector<std::string>{"include=null"}, "--set 'include=null':1:1", "not settable");
}

TEST_F(LoaderTest, SetOverridesAnIncludedValue) {
  write("base.yaml", kBase);
  const std::string p = write("main.yaml", "include: [base.yaml]\nparallel: {tp: 1}\n");
  EXPECT_EQ(load_scenario(p).parallel.tp, 1);
  EXPECT_EQ(load_scenario(p, {"parallel.tp=4"}).parallel.tp, 4);
}

TEST_F(LoaderTest, SetOfUnknownKeyIsAnError) {
  const std::string p = write("s.yaml", kBase);
  EXPECT_LOAD_ERROR(p, std::vector<std::string>{"parallel.tpp=4"}, "--set 'parallel.tpp=4':1:1",
                    "unknown key 'parallel.tpp', did you mean 'tp'?");
  EXPECT_LOAD_ERROR(p, std::vector<std::string>{"bogus.thing=1"}, "--set 'bogus.thing=1':1:1", "unknown key");
}

TEST_F(LoaderTest, SetOfAMappingKeyIsAnError) {
  const std::string p = write("s.yaml", kBase);
  EXPECT_LOAD_ERROR(p, std::vector<std::string>{"parallel=4"}, "--set 'parallel=4':1:1",
                    "'parallel' is a mapping; set one of its keys");
  EXPECT_LOAD_ERROR(p, std::vector<std::string>{"include=x.yaml"}, "--set 'include=x.yaml':1:1", "not settable");
}

// Regression: counts beyond any machine were truncated to int and ran as 1 node.
TEST_F(LoaderTest, HugeCountsAreOutOfRangeNotTruncated) {
  const std::string p = write("s.yaml", "cluster: {preset: dgx-h100, nodes: 4294967297}\nmodel: {preset: gpt3-1.3b}\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":1:36", "cluster.nodes = 4294967297 is out of range");
  const std::string q =
      write("q.yaml", "cluster: {preset: dgx-h100}\nmodel: {preset: gpt3-1.3b, hidden: 99999999999}\n");
  EXPECT_LOAD_ERROR(q, kNoSets, q + ":2:36", "out of range");
}

// Regression: overriding the heads of an MHA preset silently made it GQA.
TEST_F(LoaderTest, KvHeadsFollowHeadsForMhaPresetsButKeepGqaPresets) {
  const Scenario mha =
      load_scenario(write("a.yaml", "cluster: {preset: dgx-h100}\nmodel: {preset: gpt3-1.3b, heads: 32}\n"));
  EXPECT_EQ(mha.model.kv_heads, 32);
  const Scenario gqa =
      load_scenario(write("b.yaml", "cluster: {preset: dgx-h100}\nmodel: {preset: llama3-8b, heads: 64}\n"));
  EXPECT_EQ(gqa.model.kv_heads, 8);
}

// Regression: a merged block kept the included file's position.
TEST_F(LoaderTest, MergedBlocksPointAtTheIncludingFile) {
  write("inc.yaml", "parallel:\n  tp: 2\n");
  const std::string p =
      write("main.yaml",
            "include: [inc.yaml]\ncluster: {preset: dgx-h100}\nmodel: {preset: gpt3-1.3b}\nparallel:\n  dp: 4\n");
  const Scenario s = load_scenario(p);
  EXPECT_EQ(s.mark("parallel").file, p);
  EXPECT_EQ(s.mark("parallel.tp").file, path("inc.yaml"));
}

TEST_F(LoaderTest, SetWithoutEqualsIsAnError) {
  const std::string p = write("s.yaml", kBase);
  EXPECT_LOAD_ERROR(p, std::vector<std::string>{"parallel.tp"}, "--set 'parallel.tp':1:1", "--set expects key=value");
}

TEST_F(LoaderTest, SetWithWrongTypePointsAtTheValue) {
  const std::string p = write("s.yaml", kBase);
  // "parallel.tp=four": the value starts at column 13.
  EXPECT_LOAD_ERROR(p, std::vector<std::string>{"parallel.tp=four"}, "--set 'parallel.tp=four':1:13",
                    "parallel.tp must be an integer, got 'four'");
}

// ---- the error catalogue, with exact positions ---------------------------------------------

TEST_F(LoaderTest, UnknownKeySuggestsTheNearestKey) {
  const std::string p = write("s.yaml",
                              "cluster:\n"
                              "  preset: dgx-h100\n"
                              "model:\n"
                              "  preset: gpt3-1.3b\n"
                              "parallel:\n"
                              "  tpp: 2\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":6:3", "unknown key 'parallel.tpp', did you mean 'tp'?");
}

TEST_F(LoaderTest, UnknownTopLevelKeySuggestsTheNearestKey) {
  const std::string p = write("s.yaml", "clustr:\n  preset: dgx-h100\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":1:1", "unknown key 'clustr', did you mean 'cluster'?");
}

TEST_F(LoaderTest, UnknownKeyFarFromAnyListsTheExpectedKeys) {
  const std::string p = write("s.yaml", "cluster:\n  preset: dgx-h100\n  frobnication_level: 3\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":3:3", "unknown key 'cluster.frobnication_level', expected one of: ");
  const std::string msg = load_error(p);
  EXPECT_NE(msg.find("nodes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("scale_out"), std::string::npos) << msg;
}

TEST_F(LoaderTest, WrongTypeWordForInteger) {
  const std::string p = write("s.yaml", std::string(kBase) + "  pp: 1\n  dp: four\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":9:7", "parallel.dp must be an integer, got 'four'");
}

TEST_F(LoaderTest, WrongTypeTpFour) {
  const std::string p = write("s.yaml",
                              "cluster:\n"
                              "  preset: dgx-h100\n"
                              "model:\n"
                              "  preset: gpt3-1.3b\n"
                              "parallel:\n"
                              "  tp: four\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":6:7", "parallel.tp must be an integer, got 'four'");
}

TEST_F(LoaderTest, WrongTypeListForInteger) {
  const std::string p = write("s.yaml",
                              "cluster:\n"
                              "  preset: dgx-h100\n"
                              "  nodes: [1]\n"
                              "model:\n"
                              "  preset: gpt3-1.3b\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":3:10", "cluster.nodes must be an integer, got a list");
}

TEST_F(LoaderTest, WrongTypeMappingForInteger) {
  const std::string p = write("s.yaml",
                              "cluster:\n"
                              "  preset: dgx-h100\n"
                              "  nodes:\n"
                              "    count: 2\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":4:5", "cluster.nodes must be an integer, got a mapping");
}

TEST_F(LoaderTest, WrongTypeBool) {
  const std::string p = write("s.yaml", std::string(kBase) + "  sequence_parallel: maybe\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":8:22", "parallel.sequence_parallel must be true or false, got 'maybe'");
}

TEST_F(LoaderTest, ValueForAMappingKeyIsAnError) {
  const std::string p = write("s.yaml", "cluster: dgx-h100\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":1:10", "cluster must be a mapping of keys, got a value");
}

TEST_F(LoaderTest, KeyWithoutValueIsAnError) {
  const std::string p = write("s.yaml", "cluster:\n  preset: dgx-h100\n  nodes:\nmodel: {preset: gpt3-1.3b}\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":3:3", "cluster.nodes has no value");
}

TEST_F(LoaderTest, UnknownEnumValueListsTheOptions) {
  const std::string p = write("s.yaml", std::string(kBase) + "  schedule: zigzag\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":8:13",
                    "unknown parallel.schedule 'zigzag', expected one of: gpipe, 1f1b, interleaved-1f1b");
}

TEST_F(LoaderTest, UnknownClusterPreset) {
  const std::string p = write("s.yaml", "cluster:\n  preset: dgx-z100\nmodel: {preset: gpt3-1.3b}\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":2:11", "unknown cluster.preset 'dgx-z100', expected one of: dgx-a100");
}

TEST_F(LoaderTest, UnknownModelPreset) {
  const std::string p = write("s.yaml", "cluster:\n  preset: dgx-h100\nmodel:\n  preset: gpt5\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":4:11", "unknown model.preset 'gpt5', expected one of: gpt3-1.3b");
}

TEST_F(LoaderTest, UnknownGpuPreset) {
  const std::string p = write("s.yaml", "cluster:\n  preset: dgx-h100\n  gpu: z9000\nmodel: {preset: gpt3-1.3b}\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":3:8", "unknown cluster.gpu 'z9000'");
}

TEST_F(LoaderTest, BadTimeUnit) {
  const std::string p = write("s.yaml",
                              "cluster:\n"
                              "  preset: dgx-h100\n"
                              "  scale_out:\n"
                              "    latency: 2 parsecs\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":4:14", "cluster.scale_out.latency: unknown time unit in '2 parsecs'");
}

TEST_F(LoaderTest, TimeWithoutUnit) {
  const std::string p = write("s.yaml", "cluster:\n  preset: dgx-h100\n  scale_out: {latency: 2}\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":3:24", "cluster.scale_out.latency: time '2' has no unit");
}

TEST_F(LoaderTest, BandwidthWithoutUnit) {
  const std::string p = write("s.yaml",
                              "cluster:\n"
                              "  preset: dgx-h100\n"
                              "  scale_out:\n"
                              "    nic_bandwidth: 400\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":4:20", "cluster.scale_out.nic_bandwidth: bandwidth '400' has no unit");
}

TEST_F(LoaderTest, BadBandwidthUnit) {
  const std::string p =
      write("s.yaml", "cluster:\n  preset: dgx-h100\n  scale_out:\n    nic_bandwidth: 400 furlongs\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":4:20", "unknown bandwidth unit in '400 furlongs'");
}

TEST_F(LoaderTest, NegativeTime) {
  const std::string p = write("s.yaml", "cluster:\n  preset: dgx-h100\n  scale_out:\n    latency: -2us\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":4:14", "is negative");
}

TEST_F(LoaderTest, ZeroNodes) {
  const std::string p = write("s.yaml",
                              "cluster:\n"
                              "  preset: dgx-h100\n"
                              "  nodes: 0\n"
                              "model:\n"
                              "  preset: gpt3-1.3b\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":3:10", "cluster.nodes must be positive, got 0");
}

TEST_F(LoaderTest, NegativeMicroBatch) {
  const std::string p = write("s.yaml", std::string(kBase) + "  micro_batch: -1\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":8:16", "parallel.micro_batch must be positive, got -1");
}

TEST_F(LoaderTest, ZeroModelLayers) {
  const std::string p = write("s.yaml", "cluster: {preset: dgx-h100}\nmodel:\n  preset: gpt3-1.3b\n  layers: 0\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":4:11", "model.layers must be positive, got 0");
}

TEST_F(LoaderTest, OversubscriptionBelowOne) {
  const std::string p = write("s.yaml", "cluster:\n  preset: dgx-h100\n  scale_out:\n    oversubscription: 0.5\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":4:23", "cluster.scale_out.oversubscription must be >= 1");
  // The same bounds as a topology file's and the collective command's: 1 to 1e6.
  const std::string q = write("t.yaml", "cluster:\n  preset: dgx-h100\n  scale_out:\n    oversubscription: 1e7\n");
  EXPECT_LOAD_ERROR(q, kNoSets, q + ":4:23", "cluster.scale_out.oversubscription must be at most 1e+06, got 1e7");
}

// Keys that would not be used are refused by name: a top_k beside no experts, and in
// serving a router's spread other than the independent tokens it takes.
TEST_F(LoaderTest, MoeKeysThatWouldNotBeUsed) {
  const std::string d = write("d.yaml", "cluster: {preset: dgx-h100}\nmodel: {preset: llama3-8b, moe: {top_k: 2}}\n");
  EXPECT_LOAD_ERROR(d, kNoSets, d + ":2:41", "model.moe.top_k would not be used: model.moe.experts is 0");
  const std::string off = write("o.yaml",
                                "cluster: {preset: dgx-h100}\nmodel: {preset: mixtral-8x7b, moe: {experts: 0, "
                                "top_k: 0, shared_experts: 0, expert_ffn_hidden: 0}}\n");
  EXPECT_NO_THROW(load_scenario(off));
  const std::string z = write("z.yaml",
                              "cluster: {preset: dgx-h200}\nmodel: {preset: mixtral-8x7b, moe: {routing: "
                              "{dist: zipf}}}\nparallel: {tp: 8}\ninference: {requests: 4}\n");
  EXPECT_LOAD_ERROR(z, kNoSets, z + ":2:46", "model.moe.routing would not be used: serving spreads");
  const std::string u = write("u.yaml",
                              "cluster: {preset: dgx-h200}\nmodel: {preset: mixtral-8x7b, moe: {routing: "
                              "{dist: uniform}}}\nparallel: {tp: 8}\ninference: {requests: 4}\n");
  EXPECT_NO_THROW(load_scenario(u));
}

TEST_F(LoaderTest, ZeroStageAboveThree) {
  const std::string p = write("s.yaml", std::string(kBase) + "  zero_stage: 4\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":8:15", "parallel.zero_stage must be 0, 1, 2 or 3, got 4");
}

TEST_F(LoaderTest, BadPlacement) {
  const std::string p = write("s.yaml", std::string(kBase) + "  placement: tp-dp-pp\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":8:14", "parallel.placement 'tp-dp-pp' must name each of tp, cp, ep, dp, pp once");
}

TEST_F(LoaderTest, DuplicateKey) {
  const std::string p = write("s.yaml",
                              "cluster:\n"
                              "  preset: dgx-h100\n"
                              "  nodes: 1\n"
                              "  nodes: 2\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":4:3", "duplicate key 'nodes'");
}

TEST_F(LoaderTest, DuplicateTopLevelKey) {
  const std::string p =
      write("s.yaml", "cluster: {preset: dgx-h100}\nmodel: {preset: gpt3-1.3b}\ncluster: {nodes: 2}\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":3:1", "duplicate key 'cluster'");
}

// yaml-cpp reports an unclosed bracket where it finds out: at the first token that
// cannot continue the flow collection (or at the end of the file).
TEST_F(LoaderTest, MalformedYamlUnclosedFlowSequence) {
  const std::string p = write("s.yaml",
                              "cluster:\n"
                              "  preset: dgx-h100\n"
                              "include: [a.yaml\n"
                              "model:\n"
                              "  preset: gpt3-1.3b\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":4:6", "malformed YAML: end of sequence flow not found");
}

TEST_F(LoaderTest, MalformedYamlUnclosedFlowSequenceAtEndOfFile) {
  const std::string p = write("s.yaml", "parallel:\n  tp: [2\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":3:1", "malformed YAML: end of sequence flow not found");
}

TEST_F(LoaderTest, MalformedYamlUnclosedFlowMapping) {
  const std::string p = write("s.yaml", "cluster: {preset: dgx-h100\nmodel: {preset: gpt3-1.3b}\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":2:6", "malformed YAML: end of map flow not found");
}

TEST_F(LoaderTest, MalformedYamlBadIndentation) {
  const std::string p = write("s.yaml", "cluster:\n  preset: dgx-h100\n   nodes: 2\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":3:9", "malformed YAML: illegal map value");
}

TEST_F(LoaderTest, MalformedYamlInSetValue) {
  const std::string p = write("s.yaml", kBase);
  const std::string msg = load_error(p, {"parallel.tp=[4"});
  EXPECT_TRUE(starts_with(msg, "--set 'parallel.tp=[4':")) << msg;
  EXPECT_NE(msg.find(": error: malformed YAML"), std::string::npos) << msg;
}

TEST_F(LoaderTest, ScenarioThatIsNotAMapping) {
  const std::string p = write("s.yaml", "- cluster\n- model\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":1:1", "a scenario must be a mapping of keys, got a list");
}

TEST_F(LoaderTest, MissingClusterPreset) {
  const std::string p = write("s.yaml", "cluster:\n  nodes: 2\nmodel: {preset: gpt3-1.3b}\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":2:3", "cluster.preset is required");
}

TEST_F(LoaderTest, MissingModel) {
  const std::string p = write("s.yaml", "cluster:\n  preset: dgx-h100\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":1:1", "model is required");
}

TEST_F(LoaderTest, IncompleteCustomModel) {
  const std::string p = write("s.yaml", "cluster: {preset: dgx-h100}\nmodel:\n  layers: 2\n  hidden: 1024\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":3:3", "model.heads is not set");
}

TEST_F(LoaderTest, HeadsNotDividingHidden) {
  const std::string p =
      write("s.yaml", "cluster: {preset: dgx-h100}\nmodel:\n  preset: gpt3-1.3b\n  heads: 12\n  kv_heads: 12\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":4:10", "model.heads (12) must divide model.hidden (2048)");
}

TEST_F(LoaderTest, KvHeadsNotDividingHeads) {
  const std::string p = write("s.yaml", "cluster: {preset: dgx-h100}\nmodel:\n  preset: gpt3-1.3b\n  kv_heads: 5\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":4:13", "model.kv_heads (5) must divide model.heads (16)");
}

TEST_F(LoaderTest, SweepOfUnknownKeyIsAnError) {
  const std::string p = write("s.yaml", std::string(kBase) + "sweep:\n  parallel.tq: [1, 2]\n");
  EXPECT_LOAD_ERROR(p, kNoSets, p + ":9:3", "sweep: unknown key 'parallel.tq'");
}

TEST_F(LoaderTest, SweepIsCollected) {
  const std::string p =
      write("s.yaml", std::string(kBase) + "sweep:\n  parallel.tp: [1, 2, 4]\n  parallel.micro_batch: [1, 2]\n");
  Scenario s = load_scenario(p);
  ASSERT_EQ(s.sweep.size(), 2u);
  EXPECT_EQ(s.sweep[0].first, "parallel.tp");
  EXPECT_EQ(s.sweep[0].second.seq.size(), 3u);
  EXPECT_EQ(s.sweep[1].first, "parallel.micro_batch");
}

// ---- the contract: SCENARIO.md's keys and the shipped examples -----------------------------

// Dotted keys of every leaf of a scenario document (sweep's children are key paths, not
// keys; inference's children are not read by this loader).
void collect_keys(const YNode& n, const std::string& parent, std::set<std::string>& out) {
  for (const auto& [k, v] : n.map) {
    const std::string key = parent.empty() ? k : parent + "." + k;
    out.insert(key);
    if (v.kind == YNode::Kind::Map && key != "sweep" && key != "inference") collect_keys(v, key, out);
  }
}

// Topology files (cluster.topology_file) are named *.topology.yaml; they are not scenarios.
bool is_topology_file(const fs::path& p) {
  const std::string name = p.filename().string();
  return name.size() > 14 && name.compare(name.size() - 14, 14, ".topology.yaml") == 0;
}

std::vector<fs::path> example_files() {
  std::vector<fs::path> out;
  for (const auto& e : fs::recursive_directory_iterator(fs::path(CLUSTERSIM_SOURCE_DIR) / "scenarios" / "examples"))
    if (e.is_regular_file() && e.path().extension() == ".yaml" && !is_topology_file(e.path())) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ScenarioExamples, EveryTopologyFileLoads) {
  int n = 0;
  for (const auto& e : fs::recursive_directory_iterator(fs::path(CLUSTERSIM_SOURCE_DIR) / "scenarios" / "examples"))
    if (e.is_regular_file() && is_topology_file(e.path())) {
      ++n;
      EXPECT_NO_THROW((void)load_topology_file(e.path().string(), SourceMark{})) << e.path();
    }
  EXPECT_GE(n, 2);
}

TEST(ScenarioKeyDocs, ListsEveryKeyUsedInTheShippedExamples) {
  std::set<std::string> documented;
  for (const KeyDoc& d : scenario_key_docs()) {
    EXPECT_FALSE(d.key.empty());
    EXPECT_FALSE(d.type.empty()) << d.key;
    EXPECT_FALSE(d.doc.empty()) << d.key;
    EXPECT_TRUE(documented.insert(d.key).second) << "documented twice: " << d.key;
  }
  const auto files = example_files();
  ASSERT_GE(files.size(), 4u);
  for (const fs::path& f : files) {
    std::set<std::string> used;
    collect_keys(load_yaml_file(f.string(), SourceMark{}), "", used);
    EXPECT_FALSE(used.empty()) << f;
    for (const std::string& k : used) EXPECT_TRUE(documented.count(k)) << f << " uses undocumented key " << k;
  }
  for (const char* k :
       {"parallel.tp", "parallel.dp", "cluster.preset", "model.preset", "output.sqlite", "output.trace", "include"})
    EXPECT_TRUE(documented.count(k)) << k;
}

TEST(ScenarioExamples, EveryTopLevelExampleLoads) {
  for (const fs::path& f : example_files()) {
    if (f.parent_path().filename() == "common") continue;
    SCOPED_TRACE(f.string());
    Scenario s;
    ASSERT_NO_THROW(s = load_scenario(f.string()));
    EXPECT_FALSE(s.cluster.node.preset.empty());
    EXPECT_GT(s.gpus(), 0);
    if (!s.jobs.empty()) {  // a jobs: file: each job is a scenario of its own
      for (const JobSpec& j : s.jobs)
        EXPECT_NO_THROW(load_scenario((f.parent_path() / j.scenario).string())) << j.scenario;
      continue;
    }
    if (!s.chakra_dir.empty()) continue;  // a workload of Chakra traces has no model of its own
    if (!s.model.blocks.empty()) {         // a model of blocks
      EXPECT_GT(s.model.total_params(), 0);
      continue;
    }
    EXPECT_GT(s.model.layers, 0);
  }
}

TEST_F(LoaderTest, TheContractDocumentsExampleLoads) {
  // The scenario block of SCENARIO.md, minus its include (the file is not shipped).
  const std::string p = write("contract.yaml", R"(name: gpt3-175b-1024xA100
cluster:
  preset: dgx-a100
  nodes: 128
  gpus_per_node: 8
  gpu: a100-sxm-80gb
  scale_out:
    topology: fat-tree
    nic_bandwidth: 200Gbps
    oversubscription: 1.0
    latency: 2us
model:
  preset: gpt3-175b
  layers: 96
  hidden: 12288
  heads: 96
  kv_heads: 96
  ffn_hidden: 49152
  ffn_type: gelu
  vocab: 51200
  seq_len: 2048
  dtype: bf16
  moe: {experts: 0, top_k: 0, shared_experts: 0, expert_ffn_hidden: 0}
parallel:
  dp: 16
  tp: 8
  pp: 8
  cp: 1
  ep: 1
  sequence_parallel: true
  zero_stage: 1
  schedule: 1f1b
  virtual_stages: 1
  micro_batch: 1
  placement: tp-cp-ep-dp-pp
training:
  global_batch: 1536
  iterations: 1
  recompute: none
  optimizer: adam
collectives:
  algorithm: auto
network_model: flow
calibration: calibrate/profiles/h200.yaml
output:
  sqlite: out/run.sqlite
  trace: out/run.trace.json
sweep:
  parallel.tp: [2, 4, 8]
  parallel.pp: [4, 8, 16]
)");
  Scenario s;
  ASSERT_NO_THROW(s = load_scenario(p));
  EXPECT_EQ(s.name, "gpt3-175b-1024xA100");
  EXPECT_EQ(s.gpus(), 1024);
  EXPECT_EQ(s.parallel.dp, 16);
  EXPECT_EQ(s.parallel.tp, 8);
  EXPECT_EQ(s.parallel.pp, 8);
  EXPECT_TRUE(s.parallel.sequence_parallel);
  EXPECT_EQ(s.parallel.zero_stage, 1);
  EXPECT_EQ(s.training.global_batch, 1536);
  EXPECT_EQ(s.network_model, "flow");
  EXPECT_EQ(s.output_sqlite, "out/run.sqlite");
  EXPECT_EQ(s.output_trace, "out/run.trace.json");
  EXPECT_EQ(s.sweep.size(), 2u);
}

}  // namespace
// network_model: auto (the default) takes the flow network where concurrent transfers
// must share a link, and the analytic one where every GPU owns its NIC.
TEST_F(LoaderTest, NetworkModelAutoIsFlowWhereGpusShareALink) {
  int files = 0;
  const auto model_of = [&](const std::string& cluster, const std::string& extra = "") {
    const std::string text = "cluster: " + cluster + "\nmodel: {preset: gpt3-1.3b, layers: 2}\n" + extra;
    return load_scenario(write("net" + std::to_string(files++) + ".yaml", text)).network_model;
  };
  EXPECT_EQ(model_of("{preset: dgx-h100, nodes: 2}"), "analytic");
  EXPECT_EQ(model_of("{preset: dgx-h100, nodes: 2, scale_out: {nics_per_node: 4}}"), "flow");
  EXPECT_EQ(model_of("{preset: dgx-h100, nodes: 2, scale_out: {oversubscription: 2}}"), "flow");
  EXPECT_EQ(model_of("{preset: dgx-h100, nodes: 1, scale_out: {nics_per_node: 4}}"), "analytic");
  EXPECT_EQ(model_of("{preset: dgx-h100, nodes: 2, scale_out: {nics_per_node: 4}}", "network_model: analytic\n"),
            "analytic");
  EXPECT_EQ(model_of("{preset: dgx-h100, nodes: 2}", "network_model: auto\n"), "analytic");
  EXPECT_EQ(model_of("{preset: dgx-h100, nodes: 2}", "network_model: flow\n"), "flow");
}

}  // namespace clustersim
