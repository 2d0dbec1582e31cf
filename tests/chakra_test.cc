// Chakra execution traces (plan/chakra.h): the wire format, the export against the plan
// it came from, the round trip through `workload: {chakra: DIR}`, foreign traces, and
// what cannot be imported.
#include "plan/chakra.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>

#include "cost_models/compute.h"
#include "plan/protobuf_wire.h"
#include "plan/training_planner.h"
#include "scenarios/error.h"
#include "sim/run.h"
#include "support/temp_scenario.h"
#include "topology/presets.h"

#ifndef CLUSTERSIM_SOURCE_DIR
#define CLUSTERSIM_SOURCE_DIR "."
#endif

namespace clustersim {
namespace {

namespace fs = std::filesystem;
using testing::scenario_from_text;
using testing::temp_dir;

double metric(const RunOutcome& r, const std::string& key) {
  for (const auto& [k, v] : r.metrics)
    if (k == key) return v;
  return -1;
}

TEST(ProtobufWire, VarintsAndFieldsRoundTrip) {
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{127}, uint64_t{128}, uint64_t{300}, uint64_t{1} << 35,
                     ~uint64_t{0}}) {
    wire::Writer w;
    w.u64(5, v);
    wire::Reader r(w.str());
    const wire::Field f = r.field();
    EXPECT_EQ(f.number, 5u);
    EXPECT_EQ(f.value, v);
    EXPECT_TRUE(r.done());
  }
  wire::Writer w;
  w.varint(300);
  EXPECT_EQ(w.str(), std::string("\xac\x02", 2));  // the protobuf guide's own example
  wire::Writer n;
  n.i64(9, -1);  // int64 -1: ten bytes of two's complement
  EXPECT_EQ(n.str().size(), 11u);
  wire::Writer d;
  d.f64(3, 1.5);
  EXPECT_EQ(wire::Reader(d.str()).field().as_double(), 1.5);
  EXPECT_THROW(wire::Reader(std::string("\x08\x80", 2)).field(), wire::ParseError);
  EXPECT_THROW(wire::Reader(std::string("\x12\x05", 2) + "ab").field(), wire::ParseError);
}

// Pipeline, tensor and data parallel: every op kind, sends and receives, three groups.
Scenario layered() {
  return scenario_from_text(
      "name: chakra-l\ncluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: gpt3-1.3b, layers: 4}\n"
      "parallel: {tp: 2, pp: 2, dp: 4}\ntraining: {global_batch: 16}\n",
      "chakra-l");
}

TEST(Chakra, ExportCarriesThePlan) {
  const Scenario s = layered();
  const TrainingPlan tp = build_training_plan(s);
  const Plan& plan = tp.plan;
  const std::vector<ChakraFile> files =
      plan_to_chakra(plan, s.name, program_compute_seconds(plan, s.cluster.node.gpu, ComputeProfile{}));
  ASSERT_EQ(files.size(), static_cast<size_t>(plan.world_size) + 1);
  EXPECT_EQ(files.back().name, "comm_group.json");
  std::map<std::tuple<int32_t, int32_t, int32_t>, int64_t> sends, recvs;  // (src, dst, tag) -> bytes
  for (int32_t r = 0; r < plan.world_size; ++r) {
    EXPECT_EQ(files[static_cast<size_t>(r)].name, "chakra-l." + std::to_string(r) + ".et");
    const ChakraTrace t = decode_chakra(files[static_cast<size_t>(r)].bytes);
    EXPECT_EQ(t.version, "0.0.4");
    const Program& prog = plan.programs[plan.rank_program[static_cast<size_t>(r)]];
    ASSERT_EQ(t.nodes.size(), prog.ops.size());
    std::map<std::string, uint64_t> last;  // stream -> last node
    for (size_t i = 0; i < prog.ops.size(); ++i) {
      const Op& op = prog.ops[i];
      const ChakraNode& n = t.nodes[i];
      EXPECT_EQ(n.id, i);
      EXPECT_EQ(n.data_deps.size(), op.dep_count);
      EXPECT_EQ(n.stream, prog.streams[op.stream]);
      // The stream's previous op is a dependency, of data or of control.
      if (last.count(n.stream)) {
        bool ordered = false;
        for (const auto* d : {&n.data_deps, &n.ctrl_deps})
          for (uint64_t x : *d) ordered |= x == last[n.stream];
        EXPECT_TRUE(ordered) << "node " << i;
      }
      last[n.stream] = i;
      if (op.kind == OpKind::Collective) {
        EXPECT_EQ(n.type, 7u);
        EXPECT_EQ(n.comm_size, op.bytes);
        EXPECT_EQ(n.comm_type, static_cast<int64_t>(chakra_comm_type(op.collective)));
        EXPECT_EQ(n.pg_name, std::to_string(plan.group_of(r, op.group)));
      } else if (op.kind == OpKind::Send || op.kind == OpKind::Recv) {
        EXPECT_EQ(n.type, op.kind == OpKind::Send ? 5u : 6u);
        (op.kind == OpKind::Send ? sends : recvs)[{n.comm_src, n.comm_dst, n.comm_tag}] = n.comm_size;
      } else {
        EXPECT_EQ(n.type, 4u);
        const double flops = op.flops > 0 ? op.flops : op.kind == OpKind::Gemm ? gemm_flops(op)
                                                     : op.kind == OpKind::Attention ? attention_flops(op) : 0;
        EXPECT_EQ(n.num_ops, std::llround(flops));
        EXPECT_EQ(n.tensor_size, static_cast<uint64_t>(op.bytes_read + op.bytes_written));
        EXPECT_NEAR(static_cast<double>(n.duration_micros), n.duration_s * 1e6, 0.5001);
      }
    }
  }
  EXPECT_FALSE(sends.empty());
  EXPECT_EQ(sends, recvs) << "every send meets a receive of the same size and tag";
}

// Exported and read back, the plan runs to the same iteration time.
TEST(Chakra, RoundTripRunsTheSameStep) {
  // Under context parallelism the ring's exchange is posted beside the attention blocks, and
  // holds the channels its own communicator allows: the traces carry each send's group.
  for (const std::string& layout :
       {std::string("tp: 2, pp: 2, dp: 4"), std::string("dp: 16"),
        std::string("tp: 2, pp: 2, cp: 2, schedule: interleaved-1f1b, virtual_stages: 2, sequence_parallel: true")}) {
    const std::string dir = temp_dir("chakra-rt");
    fs::remove_all(dir + "/traces");
    const Scenario s = scenario_from_text(
        "name: rt\ncluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: gpt3-1.3b, layers: 4}\n"
        "parallel: {" + layout + "}\ntraining: {global_batch: 16}\n", "chakra-rt-s");
    const RunOutcome original = run_training(s);
    fs::create_directories(dir + "/traces");
    for (const ChakraFile& f :
         plan_to_chakra(original.plan.plan, "rt",
                        program_compute_seconds(original.plan.plan, s.cluster.node.gpu, ComputeProfile{})))
      std::ofstream(dir + "/traces/" + f.name, std::ios::binary) << f.bytes;
    std::ofstream(dir + "/w.yaml") << "cluster: {preset: dgx-h100, nodes: 2}\nworkload: {chakra: traces}\n";
    const RunOutcome back = run_training(load_scenario(dir + "/w.yaml"));
    EXPECT_NEAR(metric(back, "iteration_time_s") / metric(original, "iteration_time_s"), 1.0, 1e-9) << layout;
    EXPECT_NEAR(metric(back, "exposed_comm_tp_s"), metric(original, "exposed_comm_tp_s"), 1e-9) << layout;
    EXPECT_EQ(metric(back, "simulated_ranks"), 16);
  }
}

// clustersim's own traces carry each kernel's shape: imported, the ops are the plan's
// kernels again (not recorded times), so a run on another GPU costs them on that GPU.
TEST(Chakra, ImportKeepsKernelShapes) {
  const std::string dir = temp_dir("chakra-shape");
  fs::remove_all(dir + "/traces");
  fs::create_directories(dir + "/traces");
  const Scenario s = scenario_from_text(
      "name: sh\ncluster: {preset: dgx-h100}\nmodel: {preset: gpt3-1.3b, layers: 2}\nparallel: {tp: 2, dp: 4}\n"
      "training: {global_batch: 8}\n",
      "chakra-shape-s");
  const TrainingPlan tp = build_training_plan(s);
  for (const ChakraFile& f :
       plan_to_chakra(tp.plan, "sh", program_compute_seconds(tp.plan, s.cluster.node.gpu, ComputeProfile{})))
    std::ofstream(dir + "/traces/" + f.name, std::ios::binary) << f.bytes;
  const Plan back = plan_from_chakra(dir + "/traces", s.cluster.node.gpu);
  const Program& a = tp.plan.programs[0];
  const Program& b = back.programs[back.rank_program[0]];
  ASSERT_EQ(a.ops.size(), b.ops.size());
  int kernels = 0;
  for (size_t i = 0; i < a.ops.size(); ++i) {
    const Op &x = a.ops[i], &y = b.ops[i];
    if (x.kind != OpKind::Gemm && x.kind != OpKind::Attention && x.kind != OpKind::Memory) continue;
    ++kernels;
    EXPECT_EQ(y.kind, x.kind) << i;
    EXPECT_EQ(y.fixed_seconds, 0) << i;
    EXPECT_EQ(std::tie(y.m, y.n, y.k, y.batch, y.bytes_read, y.bytes_written), std::tie(x.m, x.n, x.k, x.batch, x.bytes_read, x.bytes_written)) << i;
    EXPECT_EQ(std::tie(y.heads, y.kv_heads, y.q_len, y.kv_len, y.head_dim, y.causal), std::tie(x.heads, x.kv_heads, x.q_len, x.kv_len, x.head_dim, x.causal)) << i;
    EXPECT_EQ(y.dtype, x.dtype) << i;
    EXPECT_EQ(y.access, x.access) << i;
  }
  EXPECT_GT(kernels, 20);
  // On A100s the imported step is the A100 step, not the H100's recorded times.
  std::ofstream(dir + "/w.yaml") << "cluster: {preset: dgx-a100}\nworkload: {chakra: traces}\n";
  const RunOutcome on_a100 = run_training(load_scenario(dir + "/w.yaml"));
  Scenario direct = s;
  direct.cluster.node = *find_node_preset("dgx-a100");
  EXPECT_NEAR(metric(on_a100, "iteration_time_s") / metric(run_training(direct), "iteration_time_s"), 1.0, 1e-9);
}

// The shipped Mixtral example (EP with all-to-alls, TP, PP, DP) round trips exactly too.
TEST(Chakra, MixtralExampleRoundTrips) {
  const std::string dir = temp_dir("chakra-mixtral");
  fs::remove_all(dir + "/traces");
  fs::create_directories(dir + "/traces");
  const std::string src = std::string(CLUSTERSIM_SOURCE_DIR) + "/scenarios/examples/training/mixtral-8x7b-64xh100-ep.yaml";
  const Scenario s = load_scenario(src);
  const RunOutcome original = run_training(s);
  for (const ChakraFile& f : plan_to_chakra(
           original.plan.plan, "mx", program_compute_seconds(original.plan.plan, s.cluster.node.gpu, ComputeProfile{})))
    std::ofstream(dir + "/traces/" + f.name, std::ios::binary) << f.bytes;
  std::ofstream(dir + "/w.yaml") << "cluster: {preset: " << s.cluster.node.preset << ", nodes: " << s.cluster.nodes
                                 << "}\nnetwork_model: " << s.network_model << "\nworkload: {chakra: traces}\n";
  const RunOutcome back = run_training(load_scenario(dir + "/w.yaml"));
  EXPECT_NEAR(metric(back, "iteration_time_s") / metric(original, "iteration_time_s"), 1.0, 1e-9);
}

// A message preceded by its length, as Chakra's encodeMessage writes it.
std::string delimited(const std::string& m) {
  wire::Writer w;
  w.varint(m.size());
  return w.str() + m;
}

// Encodes one foreign-style trace: nodes with only Chakra's own fields and attributes.
std::string foreign_trace(double duration_us, int64_t num_ops, int64_t comm_bytes) {
  auto attr = [](const std::string& name, int field, uint64_t v) {
    wire::Writer a;
    a.bytes(1, name);
    a.u64(static_cast<uint32_t>(field), v);
    return a.str();
  };
  wire::Writer meta;
  meta.bytes(1, "0.0.4");
  wire::Writer comp;
  comp.u64(1, 7);
  comp.bytes(2, "matmul");
  comp.u64(3, 4);
  if (duration_us > 0) comp.u64(7, static_cast<uint64_t>(duration_us));
  comp.bytes(10, attr("num_ops", 9, static_cast<uint64_t>(num_ops)));
  wire::Writer coll;
  coll.u64(1, 3);  // ids need not be in order: the dependency sets it
  coll.bytes(2, "allreduce");
  coll.u64(3, 7);
  coll.packed(5, {7});
  coll.bytes(10, attr("comm_type", 9, 0));
  coll.bytes(10, attr("comm_size", 9, static_cast<uint64_t>(comm_bytes)));
  return delimited(meta.str()) + delimited(coll.str()) + delimited(comp.str());
}

TEST(Chakra, ForeignTracesRunWithTheirDurationsOrARoofline) {
  const std::string dir = temp_dir("chakra-foreign");
  fs::remove_all(dir + "/t");
  fs::create_directories(dir + "/t");
  for (int r = 0; r < 8; ++r) std::ofstream(dir + "/t/job." + std::to_string(r) + ".et", std::ios::binary) << foreign_trace(1000, 0, 0);
  std::ofstream(dir + "/w.yaml") << "cluster: {preset: dgx-h100}\nworkload: {chakra: t}\ntraining: {step_overhead: 0s}\n";
  const RunOutcome a = run_training(load_scenario(dir + "/w.yaml"));
  EXPECT_NEAR(metric(a, "compute_busy_s"), 1e-3, 1e-5);  // the trace's 1,000 us, launch gap aside
  // No duration: the roofline of num_ops at the BF16 peak (989.5 TFLOP/s on H100).
  for (int r = 0; r < 8; ++r)
    std::ofstream(dir + "/t/job." + std::to_string(r) + ".et", std::ios::binary) << foreign_trace(0, 989'500'000'000, 64 << 20);
  const RunOutcome b = run_training(load_scenario(dir + "/w.yaml"));
  EXPECT_NEAR(metric(b, "compute_busy_s"), 1e-3, 1e-5);
  EXPECT_GT(metric(b, "exposed_comm_s"), 100e-6) << "a 64 MiB all-reduce of all eight ranks follows the compute";
}

TEST(Chakra, WhatCannotBeImportedIsAnError) {
  const std::string dir = temp_dir("chakra-bad");
  auto attempt = [&](const std::map<std::string, std::string>& files) {
    fs::remove_all(dir + "/t");
    fs::create_directories(dir + "/t");
    for (const auto& [name, bytes] : files) std::ofstream(dir + "/t/" + name, std::ios::binary) << bytes;
    std::ofstream(dir + "/w.yaml") << "cluster: {preset: dgx-h100}\nworkload: {chakra: t}\n";
    return run_training(load_scenario(dir + "/w.yaml"));
  };
  const std::string ok = foreign_trace(10, 0, 1024);
  EXPECT_THROW(attempt({}), InputError);                                              // no traces
  EXPECT_THROW(attempt({{"j.0.et", ok}, {"j.2.et", ok}}), InputError);                // rank 1 missing
  EXPECT_THROW(attempt({{"j.0.et", "garbage"}}), InputError);                         // not a trace
  EXPECT_THROW(attempt({{"j.0.et", ok}, {"k.1.et", ok}}), InputError);                // two workloads
  // A kernel past the documented range of times (2e6 s): refused at the trace, not run
  // into an overflow of simulated time; a message past 1 PiB likewise.
  EXPECT_THROW(attempt({{"j.0.et", foreign_trace(2e12, 0, 0)}}), InputError);
  EXPECT_THROW(attempt({{"j.0.et", foreign_trace(10, 0, (int64_t{1} << 50) + 1)}}), InputError);
  // A duration_s that is not a number of seconds (NaN) is refused, not read as none.
  {
    wire::Writer meta;
    meta.bytes(1, "0.0.4");
    wire::Writer a;
    a.bytes(1, "duration_s");
    a.f64(3, std::numeric_limits<double>::quiet_NaN());
    wire::Writer n;
    n.u64(1, 1);
    n.u64(3, 4);
    n.bytes(10, a.str());
    EXPECT_THROW(attempt({{"j.0.et", delimited(meta.str()) + delimited(n.str())}}), InputError);
  }
  // Ranks whose collectives disagree in size (1 KiB on rank 0, 2 KiB on rank 1) are
  // refused when they meet, not run at the size of whichever arrived last.
  try {
    attempt({{"j.0.et", foreign_trace(10, 0, 1024)}, {"j.1.et", foreign_trace(10, 0, 2048)}});
    ADD_FAILURE() << "collectives of 1 KiB and 2 KiB met";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("must be the same kind and size"), std::string::npos) << e.what();
  }
  // Nodes built by hand: a cycle, a dependency on a node the trace lacks, a process
  // group comm_group.json does not know.
  auto trace = [](const std::vector<std::pair<uint64_t, std::vector<uint64_t>>>& nodes, const std::string& pg) {
    wire::Writer meta;
    meta.bytes(1, "0.0.4");
    std::string out = delimited(meta.str());
    for (const auto& [id, deps] : nodes) {
      wire::Writer n;
      n.u64(1, id);
      n.u64(3, pg.empty() ? 4 : 7);
      n.packed(5, deps);
      if (!pg.empty()) {
        wire::Writer a;
        a.bytes(1, "pg_name");
        a.bytes(29, pg);
        n.bytes(10, a.str());
      }
      out += delimited(n.str());
    }
    return out;
  };
  EXPECT_THROW(attempt({{"j.0.et", trace({{1, {2}}, {2, {1}}}, "")}}), InputError);  // a cycle
  EXPECT_THROW(attempt({{"j.0.et", trace({{1, {5}}}, "")}}), InputError);            // no node 5
  EXPECT_THROW(attempt({{"j.0.et", trace({{1, {}}}, "9")}, {"comm_group.json", "{\"0\": [0]}"}}), InputError);
  EXPECT_NO_THROW(attempt({{"j.0.et", trace({{1, {}}, {2, {1}}}, "0")}, {"comm_group.json", "{\"0\": [0]}"}}));
  // A group that lists a rank twice, a group id given twice, a group of no ranks: each
  // would leave a collective that never meets, refused as the file's fault instead.
  for (const char* groups : {"{\"0\": [0, 0]}", "{\"0\": [0], \"0\": [0]}", "{\"0\": []}"})
    EXPECT_THROW(attempt({{"j.0.et", trace({{1, {}}}, "0")}, {"comm_group.json", groups}}), InputError) << groups;
  // A node's name is text of a name's length: escapes, bytes that are not UTF-8 and names
  // of 100 KB would reach the terminal, the JSON and the HTML it is printed to.
  auto named = [](const std::string& name) {
    wire::Writer meta;
    meta.bytes(1, "0.0.4");
    wire::Writer n;
    n.u64(1, 1);
    n.bytes(2, name);
    n.u64(3, 4);
    return delimited(meta.str()) + delimited(n.str());
  };
  EXPECT_NO_THROW(attempt({{"j.0.et", named("attn-proj · layer 3")}}));
  for (const std::string& name :
       {std::string("\x1b[31mred"), std::string("\xff\xfe"), std::string("\xed\xa0\x80"), std::string(5000, 'x')})
    EXPECT_THROW(attempt({{"j.0.et", named(name)}}), InputError) << name.size();
  // An empty comm_group.json names no group: a collective's pg_name is not in it, where the
  // groups had all run over every rank as one.
  EXPECT_THROW(attempt({{"j.0.et", trace({{1, {}}}, "0")}, {"comm_group.json", "{}"}}), InputError);
  // Two traces of one rank (j.1.et and j.01.et), whichever the folder lists first: refused.
  EXPECT_THROW(attempt({{"j.0.et", ok}, {"j.1.et", ok}, {"j.01.et", foreign_trace(5e6, 0, 0)}}), InputError);
  // A FIFO in comm_group.json's place is refused, not read until a writer comes.
  fs::remove_all(dir + "/t");
  fs::create_directories(dir + "/t");
  std::ofstream(dir + "/t/j.0.et", std::ios::binary) << trace({{1, {}}}, "0");
  ASSERT_EQ(mkfifo((dir + "/t/comm_group.json").c_str(), 0600), 0);
  std::ofstream(dir + "/w.yaml") << "cluster: {preset: dgx-h100}\nworkload: {chakra: t}\n";
  try {
    run_training(load_scenario(dir + "/w.yaml"));
    ADD_FAILURE() << "a FIFO comm_group.json was read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("comm_group.json: error: not a regular file"), std::string::npos) << e.what();
  }
  EXPECT_THROW(scenario_from_text("cluster: {preset: dgx-h100}\nworkload: {chakra: t}\nmodel: {preset: gpt3-1.3b}\n", "chakra-bad2"),
               InputError);
}

// protoc, where installed, reads the export with Chakra's own field numbers.
TEST(Chakra, ProtocDecodesTheExport) {
  if (std::system("protoc --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "protoc is not installed";
  const std::string dir = temp_dir("chakra-protoc");
  const Scenario s = layered();
  const Plan plan = build_training_plan(s).plan;
  const std::vector<ChakraFile> files =
      plan_to_chakra(plan, s.name, program_compute_seconds(plan, s.cluster.node.gpu, ComputeProfile{}));
  // The first node message of rank 0, without its length prefix.
  const std::string& b = files[0].bytes;
  wire::Reader r(b);
  r.take(r.varint());
  const std::string node(r.take(r.varint()));
  std::ofstream(dir + "/n.bin", std::ios::binary) << node;
  std::ofstream(dir + "/et.proto")
      << "syntax = \"proto3\";\npackage ChakraProtoMsg;\n"
         "message AttributeProto { string name = 1; string doc_string = 2; oneof value { double double_val = 3; "
         "int32 int32_val = 7; int64 int64_val = 9; uint64 uint64_val = 13; bool bool_val = 27; string string_val = 29; } }\n"
         "enum NodeType { INVALID_NODE = 0; METADATA_NODE = 1; MEM_LOAD_NODE = 2; MEM_STORE_NODE = 3; COMP_NODE = 4; "
         "COMM_SEND_NODE = 5; COMM_RECV_NODE = 6; COMM_COLL_NODE = 7; }\n"
         "message Node { uint64 id = 1; string name = 2; NodeType type = 3; repeated uint64 ctrl_deps = 4; "
         "repeated uint64 data_deps = 5; uint64 start_time_micros = 6; uint64 duration_micros = 7; "
         "repeated AttributeProto attr = 10; }\n";
  const std::string cmd = "cd " + dir + " && protoc --decode=ChakraProtoMsg.Node et.proto < n.bin > out.txt 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(dir + "/out.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_NE(ss.str().find("type: COMP_NODE"), std::string::npos) << ss.str();
  EXPECT_NE(ss.str().find("name: \"tensor_size\""), std::string::npos) << ss.str();
}

}  // namespace
}  // namespace clustersim
