// `validate --against pytorch`: the scenario's model handed to the PyTorch reference as
// JSON, its printed iteration time set against the simulated step. A stand-in script
// takes the GPU's place here (CLUSTERSIM_PYTORCH_REFERENCE), so the plumbing is tested
// on machines without one; the real script runs on the GPU machines.
#include <cstdlib>

#include "tests/cli_harness.h"

namespace {

class ValidatePytorchTest : public CliTest {
 protected:
  void TearDown() override {
    ::unsetenv("CLUSTERSIM_PYTORCH_REFERENCE");
    CliTest::TearDown();
  }
  std::string one_gpu() {
    return write("s.yaml", "cluster: {preset: dgx-h200, nodes: 1, gpus_per_node: 1}\n"
                           "model: {preset: gpt3-1.3b, layers: 2}\nparallel: {micro_batch: 4}\n"
                           "training: {global_batch: 8}\n");
  }
};

TEST_F(ValidatePytorchTest, HandsTheModelToTheReferenceAndComparesTheStep) {
  // The stand-in checks the model it is given, then reports a 0.5 s step.
  const std::string fake = write("ref.sh",
                                 "#!/bin/sh\n"
                                 "m=$2\n"
                                 "for f in '\"layers\": 2,' '\"hidden\": 2048,' '\"heads\": 16,' '\"ffn_type\": \"gelu\"' "
                                 "'\"micro_batch\": 4,' '\"micro_batches\": 2,' '\"seq_len\": 2048,'; do\n"
                                 "  grep -qF \"$f\" \"$m\" || { echo '{\"iteration_time_s\": 99}'; exit 0; }\n"
                                 "done\n"
                                 "echo '{\"iteration_time_s\": 0.5}'\n");
  fs::permissions(fake, fs::perms::owner_all);
  ::setenv("CLUSTERSIM_PYTORCH_REFERENCE", fake.c_str(), 1);
  const CliResult r = cli("validate " + quote(one_gpu()) + " --against pytorch --json");
  ASSERT_EQ(r.code, 0) << r;
  EXPECT_NE(r.out.find("\"pytorch_iteration_s\": 0.5"), std::string::npos) << r;
  EXPECT_NE(r.out.find("\"sim_iteration_s\": "), std::string::npos) << r;
  EXPECT_NE(r.out.find("\"iteration_error\": "), std::string::npos) << r;
}

TEST_F(ValidatePytorchTest, AFailingReferenceIsAClearFailure) {
  const std::string fake = write("ref.sh", "#!/bin/sh\necho 'no CUDA GPU' >&2\nexit 4\n");
  fs::permissions(fake, fs::perms::owner_all);
  ::setenv("CLUSTERSIM_PYTORCH_REFERENCE", fake.c_str(), 1);
  const CliResult r = cli("validate " + quote(one_gpu()) + " --against pytorch");
  EXPECT_EQ(r.code, 3) << r;
  EXPECT_NE(r.err.find("the PyTorch reference"), std::string::npos) << r;
  EXPECT_NE(r.err.find("no CUDA GPU"), std::string::npos) << r;
}

TEST_F(ValidatePytorchTest, OnlyOneGpuTrainingStepsAndKnownReferences) {
  const std::string many = write("m.yaml", "cluster: {preset: dgx-h200, nodes: 1}\nmodel: {preset: gpt3-1.3b, layers: 2}\n");
  EXPECT_EQ(cli("validate " + quote(many) + " --against pytorch").code, 1);
  const CliResult bad = cli("validate " + quote(one_gpu()) + " --against tensorflow");
  EXPECT_EQ(bad.code, 1) << bad;
  EXPECT_NE(bad.err.find("expected pytorch"), std::string::npos) << bad;
}

}  // namespace
