// Fidelity of the kernels each stack runs: unfused and fused attention, blocking launches,
// PyTorch eager's casts, the cross entropy, FP8 casts, recomputation and the gradient buffers.
#include <gtest/gtest.h>

#include <array>
#include <fstream>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "plan/training_planner.h"
#include "sim/executor.h"
#include "sim/run.h"
#include "support/plan_queries.h"
#include "support/temp_scenario.h"
#include "support/training_helpers.h"

namespace clustersim {
namespace {

using testing::scenario_from_text;

// Unfused attention (scores through HBM) is slower than fused, and dropout slower still;
// selective recompute costs the attention core's forward once more.
TEST(Fidelity, UnfusedAttentionDropoutAndSelectiveRecomputeCostTime) {
  const std::string base =
      "name: t\ncluster: {preset: dgx-a100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 4, seq_len: 4096, dropout: "
      "DROP}\n"
      "parallel: {tp: 1}\ntraining: {global_batch: 8, attention: ATT, recompute: REC}\n";
  auto run = [&](const std::string& att, const std::string& drop, const std::string& rec) {
    return iteration_s(filled(base, {{"DROP", drop}, {"ATT", att}, {"REC", rec}}));
  };
  const double flash = run("flash", "0", "none");
  const double unfused = run("unfused", "0", "none");
  const double unfused_dropout = run("unfused", "0.1", "none");
  const double selective = run("unfused", "0.1", "selective");
  EXPECT_GT(unfused, 1.05 * flash);
  EXPECT_GT(unfused_dropout, unfused);
  EXPECT_GT(selective, unfused_dropout);
  EXPECT_GT(run("flash", "0", "selective"), flash);  // Megatron-Core re-runs the fused forward
  // FlashAttention-2 is the fused kernel on an A100 (no Hopper features to miss)...
  EXPECT_NEAR(run("flash2", "0", "none"), flash, 1e-12);
  // ... the Triton kernel does its work slower (a profile's factor 1 makes it that kernel),
  // and it has no dropout to run.
  EXPECT_GT(run("triton", "0", "none"), 1.02 * flash);
  const std::string profile = testing::temp_dir("triton") + "/profile.yaml";
  std::ofstream(profile) << "compute: {triton_attention_factor: 1}\n";
  EXPECT_NEAR(
      iteration_s(filled(base, {{"DROP", "0"}, {"ATT", "triton"}, {"REC", "none"}}) + "calibration: " + profile + "\n"),
      flash, 1e-12);
  try {
    run("triton", "0.1", "none");
    ADD_FAILURE() << "dropout with the Triton kernel was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("model.dropout: 0"), std::string::npos) << e.what();
  }
  // A fused kernel with dropout draws its mask in-kernel, forward and backward: slower than
  // without, by the mask draws of 4 layers' attention (one sequence of 4,096 a GPU at DP 8,
  // 16 heads, the causal half) at the A100's issue-slot rate, plus the hidden dropouts' 1-byte masks.
  const double flash_dropout = run("flash", "0.1", "none");
  EXPECT_GT(flash_dropout, flash);
  const ComputeProfile prof;
  const double draws = 4.0 * 16 * 4096.0 * 4096 / 2 * (prof.attention_dropout_ops[0] + prof.attention_dropout_ops[1]) /
                       find_gpu_preset("a100-sxm-80gb")->alu_slot_rate();
  EXPECT_GT(flash_dropout - flash, 0.9 * draws);
  EXPECT_LT(flash_dropout - flash, 1.3 * draws);
}

// CUDA_LAUNCH_BLOCKING=1 (training.launch_blocking): the rank issues its ops one at a time,
// so its DP gradient reduction no longer hides behind the backward, and every kernel waits
// for its own dispatch (43 us, measured): the step is longer than without by at least the
// kernels' dispatch, and a profile's compute.blocking_launch replaces the default.
TEST(Fidelity, BlockingLaunchesSerializeTheStepAndExposeEachDispatch) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 4}\n"
      "parallel: {dp: 8}\ntraining: {global_batch: 16, launch_blocking: BLOCK}\n";
  const double async = iteration_s(filled(y, {{"BLOCK", "false"}}));
  const double blocking = iteration_s(filled(y, {{"BLOCK", "true"}}));
  const TrainingPlan tp = build_training_plan(scenario_from_text(filled(y, {{"BLOCK", "true"}}), "fidelity"));
  int kernels = 0;
  for (const Op& op : tp.plan.programs[0].ops)
    kernels += op.kind == OpKind::Gemm || op.kind == OpKind::Attention ||
               (op.kind == OpKind::Memory && op.bytes_read + op.bytes_written > 0);
  ASSERT_GT(kernels, 50);
  EXPECT_GT(blocking - async, kernels * (43e-6 - 2e-6));  // the dispatch replaces the 2 us queued gap
  const std::string profile = testing::temp_dir("blocking") + "/profile.yaml";
  std::ofstream(profile) << "compute: {blocking_launch: 10us}\n";
  const double cheaper = iteration_s(filled(y, {{"BLOCK", "true"}}) + "calibration: " + profile + "\n");
  EXPECT_LT(cheaper, blocking);
  EXPECT_GT(cheaper, async);
}

// ... and on Hopper its forward plateau is ~36 % of peak against cuDNN's 71 %: a step at
// long sequence is slower with it.
// The fused attention backward is three kernels (cuDNN and FlashAttention-2 alike) in one
// library call, so one op: the dO·O row dot, which also zeroes the FP32 dQ accumulator (8 bytes
// an element of Q), the main kernel, and dQ's conversion to 16 bits (6 bytes), each small one
// a kernel's floor and launch gap and its stream; five with GQA (dK's and dV's reductions). Priced so, the op
// reproduces the timed backwards of the H200 tile measurement (calibrate/measurements/attention-tiles-h200-
// 2026-12-03/tiles.csv) within 5 % from 1.9 query tiles per SM up, including 2,048 tokens at
// 1.9 tiles, where the main kernel alone had been 9.6 % fast.
TEST(Fidelity, FusedAttentionBackwardCountsItsTwoSmallKernels) {
  const GpuSpec& h200 = *find_gpu_preset("h200-sxm");
  const ComputeProfile prof;
  auto attention = [](int64_t seq, int64_t bh, Phase ph) {
    Op a;
    a.kind = OpKind::Attention;
    a.phase = ph;
    a.batch = 1, a.heads = bh, a.kv_heads = bh, a.q_len = seq, a.kv_len = seq, a.head_dim = 128;
    a.causal = true;
    a.flops = (ph == Phase::Backward ? 2.5 : 1.0) * attention_flops(a);
    return a;
  };
  const Op bwd = attention(4096, 16, Phase::Backward);
  const double q = 4096.0 * 16 * 128;
  const double streams = 14 * q / (h200.hbm_bandwidth * prof.memory_efficiency);
  EXPECT_NEAR(attention_backward_aux_seconds(bwd, h200, prof),
              2 * (prof.kernel_latency_s + prof.launch_overhead_s) + streams, 1e-12);
  EXPECT_EQ(attention_backward_aux_seconds(attention(4096, 16, Phase::Forward), h200, prof), 0.0);
  EXPECT_EQ(timed_kernel_count(bwd, h200, prof), 3);
  // With GQA (16 query heads over 2 K/V heads) two more: dK's and dV's sums over each group,
  // the 16-bit partials of every query head read and the K/V heads' gradient written.
  Op gqa = bwd;
  gqa.kv_heads = 2;
  const double reduce = 2.0 * 2.0 * (16 + 2) * 4096.0 * 128;
  EXPECT_NEAR(attention_backward_aux_seconds(gqa, h200, prof),
              4 * (prof.kernel_latency_s + prof.launch_overhead_s) +
                  (14 * q + reduce) / (h200.hbm_bandwidth * prof.memory_efficiency),
              1e-12);
  EXPECT_EQ(timed_kernel_count(gqa, h200, prof), 5);
  EXPECT_GT(compute_seconds(gqa, h200, prof), compute_seconds(bwd, h200, prof));
  // The planner keeps one op a backward: the library call the real backend runs.
  const TrainingPlan tp = build_training_plan(scenario_from_text(
      "cluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
      "training: {global_batch: 1}\n",
      "attn-bwd"));
  int backwards = 0;
  for (const Op& op : tp.plan.programs[0].ops) backwards += op.kind == OpKind::Attention && backward_kernel(op);
  EXPECT_EQ(backwards, 2);

  auto backward = [&](bool flash2, int64_t seq, int64_t bh) {
    ComputeProfile p = prof;
    p.flash2 = flash2;
    return compute_seconds(attention(seq, bh, Phase::Backward), h200, p);
  };
  // (backend, tokens, batch x heads, measured ms)
  const std::vector<std::tuple<bool, int64_t, int64_t, double>> measured = {
      {false, 2048, 16, 0.1699}, {false, 2048, 32, 0.2665}, {false, 8192, 8, 0.7739},
      {false, 8192, 64, 5.0311}, {true, 2048, 32, 0.4714},  {true, 8192, 64, 9.5870}};
  for (const auto& [flash2, seq, bh, ms] : measured)
    EXPECT_NEAR(backward(flash2, seq, bh) / (ms * 1e-3), 1.0, 0.05)
        << (flash2 ? "flash2 " : "cudnn ") << seq << " x " << bh;
}

TEST(Fidelity, FlashAttention2IsSlowerOnHopper) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1, power_cap: CAP}\nmodel: {preset: gpt3-1.3b, "
      "layers: 4, seq_len: 16384, dropout: 0}\ntraining: {global_batch: 1, attention: ATT, step_overhead: 0s}\n";
  auto run = [&](const std::string& att, const std::string& cap) {
    return iteration_s(filled(y, {{"ATT", att}, {"CAP", cap}}));
  };
  EXPECT_GT(run("flash2", "false"), 1.25 * run("flash", "false"));
  // Under the 700 W cap the fused kernel's higher rate draws more power and loses more
  // of it to the clock; FlashAttention-2 at ~35 % of peak stays under the limit.
  EXPECT_GT(run("flash2", "true"), 1.05 * run("flash", "true"));
  EXPECT_GT(run("flash", "true"), run("flash", "false"));
}

// Plain PyTorch under autocast runs more bytes than Megatron's fused kernels for the same
// layer: the FP32 residual stream and norms, a weight cast per linear per micro-batch,
// FP32 gradient accumulation, unfused activations and the FP32 loss. Its step is slower
// by what those kernels cost, and the weight casts grow with the micro-batches. Both without
// dropout (the eager recipe runs none).
TEST(Fidelity, PytorchEagerRunsTheCastsAndUnfusedKernelsOfAutocast) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h200, nodes: 1, gpus_per_node: 1}\nmodel: {preset: gpt3-1.3b, layers: 4, "
      "dropout: 0}\n"
      "parallel: {micro_batch: 2}\ntraining: {global_batch: GB, framework: FW}\n";
  auto run = [&](const std::string& fw, const std::string& gb) {
    return iteration_s(filled(y, {{"FW", fw}, {"GB", gb}}));
  };
  const double megatron = run("megatron", "2"), eager = run("pytorch-eager", "2");
  // (The optimizer's fused Adam is the same multi-tensor class in both, and Megatron adds its
  // small gradients into the FP32 main gradients; the difference is the layers' casts and
  // unfused kernels and the FP32 loss.)
  EXPECT_GT(eager, 1.02 * megatron);
  EXPECT_LT(eager, 2.0 * megatron);
  // Four micro-batches: every one casts the weights again and accumulates into FP32 .grad.
  EXPECT_GT(run("pytorch-eager", "8") - eager, run("megatron", "8") - megatron);
  const Scenario s = scenario_from_text(filled(y, {{"FW", "pytorch-eager"}, {"GB", "4"}}), "eager");
  const TrainingPlan tp = build_training_plan(s);
  int casts = 0, dynamic = 0, multi = 0;
  for (const Op& op : tp.plan.programs[0].ops) {
    const std::string& name = tp.plan.names[op.name];
    casts += name == "autocast-cast-qkv-weight";
    dynamic += op.access == MemAccess::DynamicCast;
    multi += op.access == MemAccess::MultiTensor;
  }
  EXPECT_EQ(casts, 4 * 2);  // 4 layers x 2 micro-batches
  EXPECT_GT(dynamic, 0);
  EXPECT_EQ(multi, 3);  // grad norm, clip scale, fused AdamW
}

// training.cross_entropy: fused (MPT / LLM Foundry's loss_fn default, FlashAttention's
// xentropy kernel): the loss reads the 16-bit logits twice in its forward (the max, the sum
// of exponentials) and once in its backward, where it writes the gradient in their type;
// F.cross_entropy on logits.float() moves 48 bytes a logit through HBM (the FP32 copy,
// log_softmax and their backwards). The eager fused loss keeps no FP32 softmax for the backward.
TEST(Fidelity, FusedCrossEntropyMovesFewerBytesPerLogit) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h200, nodes: 1, gpus_per_node: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
      "parallel: {micro_batch: 2}\ntraining: {global_batch: 2, framework: FW, cross_entropy: CE}\n";
  auto plan = [&](const std::string& fw, const std::string& ce) {
    return build_training_plan(scenario_from_text(filled(y, {{"FW", fw}, {"CE", ce}}), "ce"));
  };
  const TrainingPlan unfused = plan("pytorch-eager", "unfused"), fused = plan("pytorch-eager", "fused");
  const Scenario s = scenario_from_text(filled(y, {{"FW", "pytorch-eager"}, {"CE", "fused"}}), "ce");
  const double tokens = 2.0 * static_cast<double>(s.model.seq_len);
  const double logits = tokens * static_cast<double>(s.model.vocab);
  auto loss_bytes = [&](const TrainingPlan& tp, const std::string& prefix = "") {
    double bytes = 0;
    for (const Op& op : tp.plan.programs[0].ops) {
      const std::string& name = tp.plan.names[op.name];
      const bool eager_loss = name == "cross-entropy-fused" || name == "cross-entropy-fused-backward" ||
                              name == "logits-float" || name == "log-softmax" || name == "nll-loss" ||
                              name == "nll-loss-backward" || name == "log-softmax-backward" ||
                              name == "logits-grad-cast";
      if (prefix.empty() ? eager_loss : name.rfind(prefix, 0) == 0)
        bytes += static_cast<double>(op.bytes_read + op.bytes_written);
    }
    return bytes;
  };
  EXPECT_NEAR(loss_bytes(fused) / logits, 4 * 2.0, 0.01);  // 2 + 1 reads, 1 write of 2 bytes
  EXPECT_NEAR(loss_bytes(unfused) / logits, 48.0,
              0.01);  // cast 2+4, log_softmax 12+4, nll grad 4, its backward 12+4, cast 4+2
  EXPECT_LT(iteration_s(filled(y, {{"FW", "pytorch-eager"}, {"CE", "fused"}})),
            iteration_s(filled(y, {{"FW", "pytorch-eager"}, {"CE", "unfused"}})));
  EXPECT_NEAR((unfused.memory.activations - fused.memory.activations) / logits, 4.0, 1e-6);
  // Megatron's fused vocab-parallel loss (--cross-entropy-loss-fusion): three jit-fused
  // passes (e + 4, 4 + 4 and 4 + 4 bytes a logit) and a backward that reads the kept FP32
  // softmax and writes the gradient in the logits' type (4 + e), where the unfused one moves
  // 52 (the cast, max, shift, exp, sum and softmax passes: e + 20 read, 16 written; 8 + 4 + e).
  const double e = 2.0;
  EXPECT_NEAR(loss_bytes(plan("megatron", "fused"), "cross-entropy") / logits, (e + 8) + 12 + 4 + e, 0.01);
  EXPECT_NEAR(loss_bytes(plan("megatron", "unfused"), "cross-entropy") / logits, (e + 20) + 16 + 8 + 4 + e, 0.01);
  EXPECT_EQ(plan("megatron", "fused").memory.activations, plan("megatron", "unfused").memory.activations);
}

// training.fp8_recipe: tensorwise (Transformer Engine's Float8CurrentScaling, Megatron-Bridge's
// "FP8-CS"): a cast takes its scale from the tensor it casts, so every standalone cast reads its
// input once more for the amax, and the norms and activations that wrote FP8 under delayed
// scaling write BF16 with the amax and leave the cast to a quantize kernel (2 bytes read, 2
// written an element). Under sequence parallelism the amax of each sharded tensor (the QKV and
// FC1 inputs, the output gradients of the projection and FC2) is all-reduced over TP.
TEST(Fidelity, CurrentScalingReadsEachCastInputForItsAmax) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h100, nodes: 1, gpus_per_node: GPUS}\n"
      "model: {preset: llama3-8b, layers: 2, seq_len: 4096, dtype: fp8}\n"
      "parallel: {tp: TP, sequence_parallel: SP}\ntraining: {global_batch: 1, fp8_recipe: RECIPE}\n";
  auto text = [&](const std::string& recipe, const std::string& tp) {
    return filled(y, {{"GPUS", tp}, {"TP", tp}, {"SP", tp == "1" ? "false" : "true"}, {"RECIPE", recipe}});
  };
  auto plan = [&](const std::string& recipe, const std::string& tp = "1") {
    return build_training_plan(scenario_from_text(text(recipe, tp), "cs"));
  };
  const TrainingPlan delayed = plan("delayed"), current = plan("tensorwise");
  const Scenario s = scenario_from_text(text("delayed", "1"), "cs");
  const double tokens = static_cast<double>(s.model.seq_len), h = static_cast<double>(s.model.hidden);
  const double f = static_cast<double>(s.model.ffn_hidden);
  const double qkv = h + 2.0 * static_cast<double>(s.model.kv_heads) * (h / static_cast<double>(s.model.heads));
  auto bytes = [](const TrainingPlan& tp, const std::string& part) {
    double b = 0;
    for (const Op& op : tp.plan.programs[0].ops)
      if (tp.plan.names[op.name].find(part) != std::string::npos)
        b += static_cast<double>(op.bytes_read + op.bytes_written);
    return b;
  };
  // Per layer: the amax passes read the forward's attention output and activation output (f:
  // Megatron-Core's activation is its own, FC2's Linear casts it) and the backward's four
  // gradients (FC2 and projection outputs h, FC1 outputs 2f for SwiGLU, QKV outputs qkv) once;
  // the quantize kernels after the two norms (h) move 4 bytes each.
  const double layers = 2, e = 2;
  EXPECT_NEAR(bytes(current, "-amax") / layers, tokens * e * (h + f + h + h + 2 * f + qkv) + 4 * 6, 1.0);
  EXPECT_EQ(bytes(delayed, "-amax"), 0);
  EXPECT_NEAR(bytes(current, "fp8-quantize-") / layers, tokens * 4 * (h + h), 1.0);
  EXPECT_EQ(bytes(delayed, "fp8-quantize-"), 0);
  // Either recipe casts the activation's BF16 output for FC2: 2 bytes read, the FP8 copy and
  // its transpose written.
  EXPECT_NEAR((bytes(delayed, "fp8-cast-mlp-act") - bytes(delayed, "fp8-cast-mlp-act-grad")) / layers, tokens * 4 * f,
              1.0);
  EXPECT_GT(iteration_s(text("tensorwise", "1")), iteration_s(text("delayed", "1")));
  // Sequence parallel at TP 2: four 4-byte amax all-reduces over TP per layer and pass
  // (forward: QKV and FC1 inputs; backward: projection and FC2 output gradients).
  const TrainingPlan sp = plan("tensorwise", "2");
  int amax_reductions = 0;
  for (const Op& op : sp.plan.programs[0].ops)
    if (op.kind == OpKind::Collective && sp.plan.names[op.name].find("amax-allreduce") != std::string::npos) {
      EXPECT_EQ(op.bytes, 4);
      EXPECT_EQ(op.group, GroupKind::TP);
      ++amax_reductions;
    }
  EXPECT_EQ(amax_reductions, 4 * 2);
  EXPECT_THROW(build_training_plan(scenario_from_text(
                   "name: t\ncluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1}\nmodel: {preset: llama3-8b, "
                   "layers: 2}\ntraining: {global_batch: 1, fp8_recipe: tensorwise}\n",
                   "cs")),
               InputError);
}

// Full recompute runs each layer's forward again in the backward: its attention is the
// forward kernel (the forward's FLOPs, bytes and rate), marked as recomputed, not a second
// backward; the recompute adds one forward attention's time per layer and micro-batch.
TEST(Fidelity, FullRecomputeRunsTheForwardAttentionKernelAgain) {
  for (const std::string fw : {"megatron", "pytorch-eager"}) {
    const std::string y =
        "name: t\ncluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1, power_cap: false}\n"
        "model: {preset: gpt3-1.3b, layers: 2, seq_len: 8192, dropout: 0}\n"
        "training: {global_batch: 1, framework: " +
        fw + ", recompute: REC}\n";
    const TrainingPlan tp = build_training_plan(scenario_from_text(filled(y, {{"REC", "full"}}), "rc"));
    const Program& prog = tp.plan.programs[0];
    std::vector<const Op*> fwd, recomputed, bwd;
    for (const Op& op : prog.ops) {
      if (op.kind != OpKind::Attention) continue;
      (op.recompute ? recomputed : op.phase == Phase::Forward ? fwd : bwd).push_back(&op);
    }
    ASSERT_EQ(fwd.size(), 2u) << fw;
    ASSERT_EQ(recomputed.size(), 2u) << fw;
    ASSERT_EQ(bwd.size(), 2u) << fw;
    const GpuSpec& h100 = *find_gpu_preset("h100-sxm");
    ComputeProfile p;
    p.power_cap = false;
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(recomputed[i]->phase, Phase::Backward) << fw;
      EXPECT_DOUBLE_EQ(recomputed[i]->flops, fwd[i]->flops) << fw;
      EXPECT_DOUBLE_EQ(bwd[i]->flops, 2.5 * fwd[i]->flops) << fw;
      EXPECT_DOUBLE_EQ(compute_seconds(*recomputed[i], h100, p), compute_seconds(*fwd[i], h100, p)) << fw;
      EXPECT_FALSE(backward_kernel(*recomputed[i])) << fw;
      EXPECT_TRUE(backward_kernel(*bwd[i])) << fw;
    }
    // Hardware FLOPs count the recomputed forward once more, model FLOPs do not.
    const TrainingPlan none = build_training_plan(scenario_from_text(filled(y, {{"REC", "none"}}), "rc"));
    EXPECT_DOUBLE_EQ(tp.model_flops_per_rank, none.model_flops_per_rank) << fw;
  }
}

// Under context parallelism the recomputed forward's attention is the forward's: every block
// of the ring with its K/V exchange, or the all-gathered keys and values, not the rank's own
// diagonal block alone (which had made full recompute cheaper than selective at 128K).
TEST(Fidelity, FullRecomputeUnderContextParallelismRunsTheWholeRing) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h100, nodes: 1, power_cap: false}\n"
      "model: {preset: llama3-8b, layers: 2, seq_len: 32768}\n"
      "parallel: {tp: 2, cp: 4, sequence_parallel: true, cp_comm: COMM}\n"
      "training: {global_batch: 1, recompute: REC}\n";
  for (const char* comm : {"p2p", "all-gather"}) {
    auto plan = [&](const char* rec) {
      return build_training_plan(scenario_from_text(filled(y, {{"COMM", comm}, {"REC", rec}}), "cp-rc"));
    };
    const TrainingPlan full = plan("full");
    double fwd = 0, again = 0, kv_fwd = 0, kv_again = 0;
    for (const Op& op : full.plan.programs[0].ops) {
      if (op.layer != 0) continue;
      const std::string& n = full.plan.names[op.name];
      const bool kv = n == "cp-kv-send" || n == "cp-kv-allgather";
      if (op.kind == OpKind::Attention && !backward_kernel(op)) (op.phase == Phase::Forward ? fwd : again) += op.flops;
      if (kv) (op.phase == Phase::Forward ? kv_fwd : kv_again) += static_cast<double>(op.bytes);
    }
    EXPECT_GT(fwd, 0) << comm;
    EXPECT_DOUBLE_EQ(again, fwd) << comm;
    EXPECT_GT(kv_fwd, 0) << comm;
    EXPECT_DOUBLE_EQ(kv_again, kv_fwd) << comm;
    // So the step: full recompute runs what selective does and the rest of the forward too.
    const RunOutcome f = run_training(scenario_from_text(filled(y, {{"COMM", comm}, {"REC", "full"}}), "cp-rc"));
    const RunOutcome sel = run_training(scenario_from_text(filled(y, {{"COMM", comm}, {"REC", "selective"}}), "cp-rc"));
    EXPECT_GT(f.exec.makespan, sel.exec.makespan) << comm;
    EXPECT_GT(f.plan.hardware_flops_per_rank, sel.plan.hardware_flops_per_rank) << comm;
  }
}

// Selective recompute under a fused kernel: Megatron-Core checkpoints the core attention
// (`checkpoint_core_attention`), so each layer's attention forward runs once more in the
// backward, after the output gradient and before the attention backward; nothing else is
// recomputed, and with context parallelism the ring's K/V exchange runs again with it.
TEST(Fidelity, SelectiveRecomputeRunsTheFusedAttentionForwardAgain) {
  for (const std::string cp : {"1", "2"}) {
    const std::string y =
        "name: t\ncluster: {preset: dgx-h100, nodes: 1, gpus_per_node: GPUS, power_cap: false}\n"
        "model: {preset: gpt3-1.3b, layers: 2, seq_len: 8192, dropout: 0}\n"
        "parallel: {cp: CP}\ntraining: {global_batch: 1, recompute: REC}\n";
    const TrainingPlan sel =
        build_training_plan(scenario_from_text(filled(y, {{"REC", "selective"}, {"CP", cp}, {"GPUS", cp}}), "s"));
    const TrainingPlan none =
        build_training_plan(scenario_from_text(filled(y, {{"REC", "none"}, {"CP", cp}, {"GPUS", cp}}), "n"));
    auto count = [](const TrainingPlan& t, bool recomputed, OpKind kind) {
      int n = 0;
      for (const Op& op : t.plan.programs[0].ops) n += op.kind == kind && op.recompute == recomputed;
      return n;
    };
    const int blocks = cp == "1" ? 1 : 2;  // attention kernels a layer's forward runs
    EXPECT_EQ(count(sel, true, OpKind::Attention), 2 * blocks) << cp;
    EXPECT_EQ(count(none, true, OpKind::Attention), 0) << cp;
    EXPECT_EQ(count(sel, true, OpKind::Gemm), 0) << cp;  // only the attention core
    EXPECT_EQ(count(sel, false, OpKind::Attention), count(none, false, OpKind::Attention)) << cp;
    if (cp == "2") {
      EXPECT_EQ(count(sel, true, OpKind::Send), 2) << cp;  // a K/V send per layer, again
      EXPECT_EQ(count(sel, false, OpKind::Send), count(none, false, OpKind::Send)) << cp;
    }
    // Every recomputed kernel is the forward's, in the backward phase.
    const Program& prog = sel.plan.programs[0];
    for (size_t i = 0; i < prog.ops.size(); ++i) {
      const Op& op = prog.ops[i];
      if (op.kind != OpKind::Attention || !op.recompute) continue;
      EXPECT_EQ(op.phase, Phase::Backward);
      EXPECT_FALSE(backward_kernel(op));
    }
    EXPECT_DOUBLE_EQ(sel.model_flops_per_rank, none.model_flops_per_rank) << cp;
    EXPECT_GT(sel.hardware_flops_per_rank, none.hardware_flops_per_rank) << cp;
  }
  // Unfused attention keeps its own selective recompute (QK^T, softmax, dropout, PV).
  const std::string u =
      "name: t\ncluster: {preset: dgx-a100, nodes: 1, gpus_per_node: 1}\n"
      "model: {preset: gpt3-1.3b, layers: 2}\ntraining: {global_batch: 1, attention: unfused, "
      "recompute: selective}\n";
  int recomputed_scores = 0;
  const TrainingPlan unfused = build_training_plan(scenario_from_text(u, "u"));
  for (const Op& op : unfused.plan.programs[0].ops) recomputed_scores += op.recompute && op.kind == OpKind::Gemm;
  EXPECT_EQ(recomputed_scores, 4);  // attn-scores and attn-context, two layers
}

TEST(Fidelity, PytorchEagerIsDataParallelOrFsdpOnly) {
  const std::string model = "model: {preset: gpt3-1.3b, layers: 2}\n";
  // Each case: the lines it changes, and what it adds to training:.
  for (const auto& [lines, training] :
       {std::pair<std::string, std::string>{model + "parallel: {tp: 2}\n", ""},
        {model + "parallel: {zero_stage: 1}\n", ""},
        {"model: {preset: gpt3-1.3b, layers: 2, dtype: fp8}\n", ", fp8_attention: true"}}) {
    const std::string y = "name: t\ncluster: {preset: dgx-h200, nodes: 1, gpus_per_node: 2}\n" + lines +
                          "training: {framework: pytorch-eager" + training + "}\n";
    EXPECT_THROW(build_training_plan(scenario_from_text(y, "bad")), InputError) << y;
  }
}

// FP8 in eager PyTorch is Transformer Engine's te.Linear under fp8_autocast (LLM Foundry's
// amp_fp8): each linear casts its BF16 input to FP8 with a transpose (2 bytes read, 2
// written per element), casts its FP32 weight at every forward (4 read, 2 written per
// weight, no BF16 autocast copy), runs fprop, dgrad and wgrad in FP8, and casts the
// incoming gradient in the backward, summing the bias gradient in the same kernel
// (fp8_cast_transpose_bgrad_fused), where BF16 nn.Linear reduces it on its own; attention
// and the logits stay BF16.
TEST(Fidelity, PytorchEagerFp8RunsTeLinearsWithTheirCasts) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1}\nmodel: {preset: gpt3-1.3b, layers: 4, "
      "dtype: DT}\nparallel: {micro_batch: 4}\ntraining: {global_batch: 8, framework: pytorch-eager}\n";
  const Scenario sc = scenario_from_text(filled(y, {{"DT", "fp8"}}), "fp8");
  const TrainingPlan fp8 = build_training_plan(sc);
  const ModelConfig& m = sc.model;
  const double tokens = 4.0 * static_cast<double>(m.seq_len), h = static_cast<double>(m.hidden);
  int weight_casts = 0, autocast_weight = 0, input_casts = 0, grad_casts = 0, fp8_gemms = 0, bf16_gemms = 0;
  int bias_grads = 0;
  for (const Op& op : fp8.plan.programs[0].ops) {
    const std::string& name = fp8.plan.names[op.name];
    if (name == "te-cast-qkv-weight") {
      ++weight_casts;
      const double w = h * 3.0 * h;
      EXPECT_DOUBLE_EQ(static_cast<double>(op.bytes_read), 4.0 * w);
      EXPECT_DOUBLE_EQ(static_cast<double>(op.bytes_written), 2.0 * w);
    }
    autocast_weight += name.rfind("autocast-cast-", 0) == 0 && name.find("weight") != std::string::npos &&
                       name != "autocast-cast-logits-weight";
    if (name == "te-cast-qkv-input") {
      ++input_casts;
      EXPECT_DOUBLE_EQ(static_cast<double>(op.bytes_read), 2.0 * tokens * h);
      EXPECT_DOUBLE_EQ(static_cast<double>(op.bytes_written), 2.0 * tokens * h);
      EXPECT_EQ(op.access, MemAccess::Fp8CastTranspose);
    }
    grad_casts += name == "te-cast-mlp-down-grad";
    bias_grads += name.find("-bias-grad") != std::string::npos;
    if (op.kind == OpKind::Gemm) (op.dtype == DType::FP8 ? fp8_gemms : bf16_gemms) += 1;
  }
  const TrainingPlan bf16 = build_training_plan(scenario_from_text(filled(y, {{"DT", "bf16"}}), "bf16"));
  int bf16_bias_grads = 0;
  for (const Op& op : bf16.plan.programs[0].ops)
    bf16_bias_grads += bf16.plan.names[op.name].find("-bias-grad") != std::string::npos;
  EXPECT_EQ(bias_grads, 0);
  EXPECT_EQ(bf16_bias_grads, 4 * 2 * 4);  // 4 linears a layer, 4 layers, 2 micro-batches
  EXPECT_EQ(weight_casts, 4 * 2);         // 4 layers x 2 micro-batches: no cast kept across micro-batches
  EXPECT_EQ(input_casts, 4 * 2);
  EXPECT_EQ(grad_casts, 4 * 2);
  EXPECT_EQ(autocast_weight, 0);
  EXPECT_EQ(fp8_gemms, 4 * 2 * 4 * 3);  // 4 linears x (fprop, dgrad, wgrad) per layer and micro-batch
  EXPECT_EQ(bf16_gemms, 2 * 3);         // the logits' fprop, dgrad and wgrad
  // Faster than the BF16 step where the GEMMs dominate, but by less than the 2x peak.
  const double t8 = iteration_s(filled(y, {{"DT", "fp8"}})), t16 = iteration_s(filled(y, {{"DT", "bf16"}}));
  EXPECT_LT(t8, t16);
  EXPECT_GT(t8, 0.5 * t16);
}

// Without gradient-accumulation fusion (Megatron-LM of 2021) every linear's wgrad is
// followed, at every micro-batch, by main_grad.add_(grad): the 16-bit gradient and the
// buffer read, the buffer written (FP16 main grads for an fp16 model, FP32 for bf16).
TEST(Fidelity, UnfusedGradAccumulationAddsEachWgradIntoMainGrad) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-a100, nodes: 1, gpus_per_node: 2}\nmodel: {preset: gpt3-1.3b, layers: 2, "
      "dtype: DT}\nparallel: {tp: 2}\ntraining: {global_batch: 3, grad_accumulation_fusion: F}\n";
  for (const char* dt : {"fp16", "bf16"}) {
    const Scenario sc = scenario_from_text(filled(y, {{"DT", dt}, {"F", "false"}}), "unfused");
    const TrainingPlan p = build_training_plan(sc);
    const double h = static_cast<double>(sc.model.hidden), g = std::string(dt) == "fp16" ? 2.0 : 4.0;
    int adds = 0, qkv = 0;
    for (const Op& op : p.plan.programs[0].ops) {
      const std::string& name = p.plan.names[op.name];
      adds += name.rfind("grad-accumulate-", 0) == 0;
      if (name != "grad-accumulate-qkv") continue;
      ++qkv;
      const double params = h * 3.0 * h / 2.0;  // this TP rank's half of the QKV weight
      EXPECT_DOUBLE_EQ(static_cast<double>(op.bytes_read), params * (2.0 + g)) << dt;
      EXPECT_DOUBLE_EQ(static_cast<double>(op.bytes_written), params * g) << dt;
      EXPECT_EQ(op.access, g == 2.0 ? MemAccess::Streaming : MemAccess::DynamicCast) << dt;
    }
    EXPECT_EQ(qkv, 2 * 3) << dt;             // 2 layers x 3 micro-batches
    EXPECT_EQ(adds, (2 * 4 + 1) * 3) << dt;  // 4 linears per layer and the logits, per micro-batch
    const double fused = iteration_s(filled(y, {{"DT", dt}, {"F", "true"}}));
    const double unfused = iteration_s(filled(y, {{"DT", dt}, {"F", "false"}}));
    EXPECT_GT(unfused, fused) << dt;
  }
}

// FP16 under Megatron's loss scale: before the step the FP32 main gradients are unscaled
// and checked for inf/NaN in one pass over the optimizer's shard (4 bytes read, 4 written a
// parameter), after the FP16 buffer's copy into them; BF16 runs have no loss scale.
TEST(Fidelity, Fp16StepUnscalesTheMainGradients) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2, dtype: DT}\n"
      "parallel: {dp: 8, zero_stage: 1}\ntraining: {global_batch: 8}\n";
  auto find = [](const TrainingPlan& p, const std::string& want) -> const Op* {
    for (const Op& op : p.plan.programs[0].ops)
      if (p.plan.names[op.name] == want) return &op;
    return nullptr;
  };
  const TrainingPlan fp16 = build_training_plan(scenario_from_text(filled(y, {{"DT", "fp16"}}), "fp16"));
  const TrainingPlan bf16 = build_training_plan(scenario_from_text(filled(y, {{"DT", "bf16"}}), "bf16"));
  const Op* copy = find(fp16, "main-grad-copy");
  const Op* unscale = find(fp16, "grad-unscale");
  ASSERT_NE(copy, nullptr);
  ASSERT_NE(unscale, nullptr);
  EXPECT_EQ(find(bf16, "grad-unscale"), nullptr);
  // The copy writes the shard's FP32 gradients; the unscale reads and writes them again.
  EXPECT_EQ(unscale->bytes_read, copy->bytes_written);
  EXPECT_EQ(unscale->bytes_written, copy->bytes_written);
  EXPECT_GT(unscale - copy, 0);  // after the copy
}

// parallel.grad_reduce_dtype bf16 (Megatron-Core grad_reduce_in_fp32 False): the buffer
// holds 2 bytes a parameter, the DP reduction moves half the bytes, and the optimizer
// first copies the shard into FP32; ZeRO 3 and plain PyTorch refuse it.
TEST(Fidelity, Bf16GradientBufferHalvesTheReductionAndIsCopiedBeforeTheStep) {
  const std::string y =
      "name: t\ncluster: {preset: dgx-h100, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n"
      "parallel: {dp: 8, zero_stage: 1, grad_reduce_dtype: G}\ntraining: {global_batch: 8}\n";
  auto reduced = [](const TrainingPlan& p, double& copy_read, double& copy_written) {
    double bytes = 0;
    for (const Op& op : p.plan.programs[0].ops) {
      const std::string& name = p.plan.names[op.name];
      if (name == "dp-grad-reduce-scatter") bytes += static_cast<double>(op.bytes);
      if (name == "main-grad-copy") {
        copy_read = static_cast<double>(op.bytes_read);
        copy_written = static_cast<double>(op.bytes_written);
      }
    }
    return bytes;
  };
  const Scenario s32 = scenario_from_text(filled(y, {{"G", "auto"}}), "fp32");
  const Scenario s16 = scenario_from_text(filled(y, {{"G", "bf16"}}), "bf16");
  const TrainingPlan p32 = build_training_plan(s32), p16 = build_training_plan(s16);
  double r32 = -1, w32 = -1, r16 = -1, w16 = -1;
  const double b32 = reduced(p32, r32, w32), b16 = reduced(p16, r16, w16);
  EXPECT_GT(b32, 0);
  EXPECT_DOUBLE_EQ(b16, b32 / 2);
  EXPECT_EQ(r32, -1);  // an FP32 buffer is the optimizer's main gradient: nothing to copy
  ASSERT_GT(r16, 0);
  EXPECT_DOUBLE_EQ(w16, 2 * r16);  // the shard's 2 bytes a parameter into 4
  EXPECT_DOUBLE_EQ(p16.memory.gradients, p32.memory.gradients / 2);
  // Refused: under ZeRO 3, and under plain PyTorch (DDP, zero_stage 0).
  const std::string bf16 = filled(y, {{"G", "bf16"}});
  for (const std::string& bad : {filled(bf16, {{"zero_stage: 1", "zero_stage: 3"}}),
                                 filled(bf16, {{"zero_stage: 1", "zero_stage: 0"},
                                               {"global_batch: 8}", "global_batch: 8, framework: pytorch-eager}"}})})
    EXPECT_THROW(build_training_plan(scenario_from_text(bad, "bad")), InputError) << bad;
}

}  // namespace
}  // namespace clustersim
