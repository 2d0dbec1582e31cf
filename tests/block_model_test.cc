// Models given as lists of blocks (plan/block_planner.h): parsing and its errors, FLOPs,
// frozen components, pipeline stages and dynamic axial parallelism.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "plan/block_planner.h"
#include "scenarios/error.h"
#include "sim/run.h"
#include "sim/search.h"
#include "support/temp_scenario.h"

#ifndef CLUSTERSIM_SOURCE_DIR
#define CLUSTERSIM_SOURCE_DIR "."
#endif

namespace clustersim {
namespace {

using testing::scenario_from_text;

std::string load_error(const std::string& text) {
  try {
    (void)scenario_from_text(text, "blocks-error");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::map<std::string, int> op_counts(const Plan& plan, uint32_t program) {
  std::map<std::string, int> n;
  for (const Op& op : plan.programs[program].ops) ++n[plan.names[op.name]];
  return n;
}

const std::string kExamples = std::string(CLUSTERSIM_SOURCE_DIR) + "/scenarios/examples/blocks/";

TEST(BlockModel, ErrorsNameTheBlockAndWhatItTakes) {
  const std::string head = "cluster: {preset: dgx-h100}\nmodel:\n  blocks:\n";
  EXPECT_NE(load_error(head + "    - {type: mlp, tokens: 8, hidden: 8, ffn_hidden: 8, heads: 2}\n").find(
                "'heads' does not apply to a mlp block"),
            std::string::npos);
  EXPECT_NE(load_error(head + "    - {type: attention, tokens: 8, hidden: 8}\n").find("needs heads:"),
            std::string::npos);
  EXPECT_NE(load_error(head + "    - {type: attention, tokens: 8, hidden: 9, heads: 2}\n").find("must divide hidden"),
            std::string::npos);
  EXPECT_NE(load_error(head + "    - {type: pooling}\n").find("unknown model.blocks[0].type 'pooling'"),
            std::string::npos);
  EXPECT_NE(load_error(head + "    - {type: norm, tokens: 8, hidden: 8}\n  layers: 4\n")
                .find("model.layers does not go with model.blocks"),
            std::string::npos);
  EXPECT_NE(load_error(head + "    - {repeat: 2, blocks: [{type: norm, tokens: 8, hidden: 8}], count: 3}\n")
                .find("'count' does not go with repeat:"),
            std::string::npos);
  const std::string where = load_error(head + "    - {type: norm, tokens: 8, hidden: 8}\n    - {type: conv, height: 8}\n");
  EXPECT_NE(where.find(":5:7"), std::string::npos) << where;  // the block's own position
}

// One MLP block on one GPU: the step's FLOPs are exactly forward + backward (3x forward).
TEST(BlockModel, FlopsOfAnMlpBlock) {
  const Scenario s = scenario_from_text(
      "cluster: {preset: dgx-h100, gpus_per_node: 1}\nmodel:\n  blocks:\n"
      "    - {type: mlp, count: 2, batch: 4, tokens: 512, hidden: 1024, ffn_hidden: 4096}\n"
      "parallel: {micro_batch: 2}\ntraining: {global_batch: 6}\n",
      "blocks-flops");
  const TrainingPlan tp = build_training_plan(s);
  const double rows = 2.0 * 4 * 512;  // micro-batch 2 of 4 rows each
  // Per micro-batch, in rows·h·f: forward 4 a layer, weight gradients 4 a layer, input
  // gradients 4 for the second layer and 2 for the first (no one wants the model input's
  // gradient, so mlp-up's dgrad is not run): 4 + 4 + 4 + 4 + 4 + 2 = 22.
  EXPECT_DOUBLE_EQ(tp.model_flops_per_rank, 3 * 22.0 * rows * 1024 * 4096);
  EXPECT_EQ(tp.layout.micro_batches, 3);
  const auto n = op_counts(tp.plan, 0);
  EXPECT_EQ(n.at("mlp-up"), 6);
  EXPECT_EQ(n.at("mlp-up-wgrad"), 6);
  EXPECT_EQ(n.count("grad-allreduce"), 0u);  // one GPU
  EXPECT_EQ(n.at("optimizer-step"), 1);
}

// Stable Diffusion: the frozen encoders' stage runs forward only; the UNet's stage reduces
// a gradient per trained layer over its 8 replicas.
TEST(BlockModel, FrozenComponentsRunForwardOnly) {
  const Scenario s = load_scenario(kExamples + "sd-unet-components-16xh100.yaml");
  const TrainingPlan tp = build_training_plan(s);
  ASSERT_EQ(tp.plan.programs.size(), 2u);
  for (const Op& op : tp.plan.programs[0].ops) {
    EXPECT_NE(op.phase, Phase::Backward) << tp.plan.names[op.name];
  }
  const auto n = op_counts(tp.plan, 0);
  EXPECT_EQ(n.count("optimizer-step"), 0u);
  EXPECT_EQ(n.count("pp-recv-gradient"), 0u);
  int trained = 0;
  for (const BlockSpec& b : s.model.blocks)
    if (!b.frozen) trained += static_cast<int>(b.count);
  EXPECT_EQ(op_counts(tp.plan, 1).at("grad-allreduce"), trained);
  EXPECT_EQ(tp.stage_memory[0].optimizer, 0);
  EXPECT_GT(tp.stage_memory[1].optimizer, 0);
  // The tensor between the stages is the next stage's first block's input, as the sender
  // sends it and the receiver receives it (the sender had sent its own last block's input).
  auto bytes_of = [&](size_t program, const std::string& name) {
    for (const Op& op : tp.plan.programs[program].ops)
      if (tp.plan.names[op.name] == name) return op.bytes;
    return int64_t{-1};
  };
  EXPECT_GT(bytes_of(0, "pp-send-activation"), 0);
  EXPECT_EQ(bytes_of(0, "pp-send-activation"), bytes_of(1, "pp-recv-activation"));
  const RunOutcome run = run_training(s);
  EXPECT_GT(run.exec.makespan.seconds(), 0);
}

// FastFold's DAP: an all-to-all over the tp group wherever the axis changes, forward and
// backward; none without tp.
TEST(BlockModel, AxialParallelismAllToAllsWhereTheAxisChanges) {
  const Scenario s = load_scenario(kExamples + "alphafold-trunk-dap-32xa100.yaml");
  int changes = 0;
  for (size_t i = 1; i < s.model.blocks.size(); ++i) changes += s.model.blocks[i].column != s.model.blocks[i - 1].column;
  const TrainingPlan tp = build_training_plan(s);
  const auto n = op_counts(tp.plan, 0);
  EXPECT_EQ(n.at("dap-all-to-all"), changes);
  EXPECT_EQ(n.at("dap-all-to-all-backward"), changes);
  for (const Op& op : tp.plan.programs[0].ops) {
    if (op.kind == OpKind::Attention) {
      EXPECT_TRUE(op.batch == 128 / 4 || op.batch == 256 / 4) << op.batch;  // rows split over the 4 GPUs
    }
  }
  const TrainingPlan one = build_training_plan(load_scenario(kExamples + "alphafold-trunk-dap-32xa100.yaml",
                                                             {"parallel.tp=1", "parallel.dp=32", "training.global_batch=32"}));
  EXPECT_EQ(op_counts(one.plan, 0).count("dap-all-to-all"), 0u);
  // Splitting a sample over 4 GPUs divides each rank's FLOPs by 4.
  EXPECT_NEAR(tp.model_flops_per_rank * 4, one.model_flops_per_rank, 1e-6 * one.model_flops_per_rank);
}

TEST(BlockModel, StagesSplitByFlopsWhereNotGiven) {
  std::vector<BlockSpec> blocks(4);
  for (BlockSpec& b : blocks) b.tokens = 8, b.hidden = 8, b.ffn_hidden = 8;
  EXPECT_EQ(block_stages(blocks, 2), (std::vector<int64_t>{0, 0, 1, 1}));
  blocks[0].ffn_hidden = 24;  // as heavy as the other three
  EXPECT_EQ(block_stages(blocks, 2), (std::vector<int64_t>{0, 1, 1, 1}));
  blocks[2].stage = 1;  // given for one: the others follow the block before them
  EXPECT_EQ(block_stages(blocks, 2), (std::vector<int64_t>{0, 0, 1, 1}));
}

// Without training.global_batch a step takes pp micro-batches a DP rank, as a layer model's
// does (a pipeline with one to fill each stage), one without a pipeline.
TEST(BlockModel, DefaultBatchFillsThePipelineAsALayerModelsDoes) {
  for (int pp : {1, 2, 4}) {
    const std::string p = std::to_string(pp);
    const Scenario blocks = scenario_from_text(
        "cluster: {preset: dgx-h100}\nmodel:\n  blocks:\n"
        "    - {repeat: 4, blocks: [{type: mlp, batch: 4, tokens: 512, hidden: 1024, ffn_hidden: 4096}]}\n"
        "parallel: {pp: " +
            p + "}\n",
        "blocks-default-batch");
    const Scenario layers = scenario_from_text(
        "cluster: {preset: dgx-h100}\nmodel: {preset: gpt3-1.3b, layers: 4}\nparallel: {pp: " + p + "}\n",
        "layers-default-batch");
    const TrainingPlan b = build_training_plan(blocks), l = build_training_plan(layers);
    EXPECT_EQ(b.layout.micro_batches, pp);
    EXPECT_EQ(l.layout.micro_batches, pp);
    EXPECT_EQ(b.layout.global_batch, (8 / pp) * pp);
    EXPECT_EQ(l.layout.global_batch, (8 / pp) * pp);
  }
}

TEST(BlockModel, SearchAndUnsupportedKeysAreRefused) {
  const std::string base =
      "cluster: {preset: dgx-h100}\nmodel:\n  blocks:\n    - {type: mlp, tokens: 64, hidden: 64, ffn_hidden: 64}\n";
  EXPECT_THROW(search_layouts(scenario_from_text(base, "blocks-search"), SearchOptions{}), InputError);
  EXPECT_THROW(build_training_plan(scenario_from_text(base + "parallel: {zero_stage: 1}\n", "blocks-z")), InputError);
  EXPECT_THROW(build_training_plan(scenario_from_text(base + "parallel: {cp: 2}\n", "blocks-cp")), InputError);
  // The transformer planner's FP8 and TP-overlap shapes have no meaning here.
  for (const std::string extra : {"parallel: {tp_overlap_fc2_sms: 8}\n", "parallel: {fp8_param_gather: true}\n",
                                  "training: {fp8_recipe: tensorwise}\n"})
    EXPECT_THROW(build_training_plan(scenario_from_text(base + extra, "blocks-keys")), InputError) << extra;
}

}  // namespace
}  // namespace clustersim
