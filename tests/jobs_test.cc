// Several jobs on one fabric (sim/jobs.h): contention on a shared bottleneck, placement
// checks, training beside serving.
#include "sim/jobs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "scenarios/error.h"
#include "support/temp_scenario.h"

namespace clustersim {
namespace {

using testing::temp_dir;
namespace fs = std::filesystem;

// Four one-GPU nodes, two per leaf, one spine up-link per leaf (oversubscription 2): a
// job on nodes {0, 2} and one on {1, 3} both cross leaf 0's up-link.
std::string write_files(const std::string& tag, const std::string& jobs_block) {
  const std::string dir = temp_dir(tag);
  const std::string job =
      "cluster: {preset: dgx-h100, nodes: 2, gpus_per_node: 1}\n"
      "model: {preset: gpt3-1.3b, layers: 4}\n"
      "parallel: {dp: 2, overlap_grad_reduce: false}\n"
      "training: {global_batch: 2, step_overhead: 0s}\n";
  std::ofstream(dir + "/a.yaml") << "name: a\n" << job;
  std::ofstream(dir + "/b.yaml") << "name: b\n" << job;
  std::ofstream(dir + "/jobs.yaml")
      << "cluster: {preset: dgx-h100, nodes: 4, gpus_per_node: 1, scale_out: {topology: fat-tree, nics_per_leaf: 2, "
         "oversubscription: 2}}\n"
      << jobs_block;
  return dir + "/jobs.yaml";
}

// Two identical jobs whose all-reduces meet on one link each get half of it: their
// communication takes twice as long as alone, their compute no longer.
TEST(Jobs, TwoIdenticalJobsOnABottleneckEachGetHalfOfIt) {
  const JobsOutcome o = run_jobs(load_scenario(write_files(
      "jobs-half", "jobs:\n  - {scenario: a.yaml, nodes: [0, 2]}\n  - {scenario: b.yaml, nodes: [1, 3]}\n")));
  ASSERT_EQ(o.jobs.size(), 2u);
  for (const JobOutcome& j : o.jobs) {
    EXPECT_EQ(j.kind, "training");
    EXPECT_GT(j.alone_exposed_comm_s, 0.5 * j.alone) << "the test needs a communication-bound job";
    EXPECT_NEAR(j.shared_exposed_comm_s / j.alone_exposed_comm_s, 2.0, 0.05) << j.name;
  }
  EXPECT_DOUBLE_EQ(o.jobs[0].shared, o.jobs[1].shared);
  // Placed under one leaf each, the jobs share nothing.
  const JobsOutcome apart = run_jobs(load_scenario(write_files(
      "jobs-apart", "jobs:\n  - {scenario: a.yaml, first_node: 0}\n  - {scenario: b.yaml, first_node: 2}\n")));
  for (const JobOutcome& j : apart.jobs) EXPECT_NEAR(j.slowdown(), 1.0, 1e-9) << j.name;
}

// A shorter job iterates back to back while the longest one runs; placed apart, each of
// its iterations takes what one takes alone (copies neither overlap nor idle).
TEST(Jobs, AShortJobKeepsIteratingBesideALongOne) {
  const std::string jobs_file = write_files(
      "jobs-repeat", "jobs:\n  - {scenario: a.yaml, first_node: 0}\n  - {scenario: long.yaml, first_node: 2}\n");
  const std::string dir = jobs_file.substr(0, jobs_file.rfind('/'));
  std::ofstream(dir + "/long.yaml") << "name: long\ncluster: {preset: dgx-h100, nodes: 2, gpus_per_node: 1}\n"
                                       "model: {preset: gpt3-1.3b, layers: 16}\nparallel: {dp: 2}\n"
                                       "training: {global_batch: 8, step_overhead: 0s}\n";
  const JobsOutcome o = run_jobs(load_scenario(jobs_file));
  ASSERT_EQ(o.jobs.size(), 2u);
  EXPECT_EQ(o.jobs[1].iterations, 1);
  EXPECT_EQ(o.jobs[0].iterations, std::llround(o.jobs[1].alone / o.jobs[0].alone));
  EXPECT_GE(o.jobs[0].iterations, 3);
  EXPECT_NEAR(o.jobs[0].slowdown(), 1.0, 1e-6);
}

// A job's slowest board is among its own GPUs: the same job alone takes the same time on a
// cluster of its size and on one 64 times larger (the whole cluster's count had priced it).
TEST(Jobs, AJobsSlowestBoardIsAmongItsOwnGpus) {
  auto alone = [](int64_t nodes) {
    const std::string dir = temp_dir("jobs-board-" + std::to_string(nodes));
    std::ofstream(dir + "/a.yaml") << "name: a\ncluster: {preset: dgx-h100, nodes: 2}\n"
                                      "model: {preset: gpt3-1.3b, layers: 4}\ntraining: {global_batch: 16}\n";
    std::ofstream(dir + "/jobs.yaml") << "cluster: {preset: dgx-h100, nodes: " << nodes
                                      << "}\njobs:\n  - {scenario: a.yaml, first_node: 0}\n";
    return run_jobs(load_scenario(dir + "/jobs.yaml")).jobs.at(0);
  };
  const JobOutcome small = alone(2), large = alone(128);
  EXPECT_DOUBLE_EQ(small.alone, large.alone);
  EXPECT_DOUBLE_EQ(small.shared, large.shared);
}

// Beside a larger job that shares nothing with it (its own node, its traffic inside it), a
// small job runs as it runs alone: the larger job's slowest board does not price it.
TEST(Jobs, ALargerJobsBoardsDoNotSlowASmallOne) {
  const std::string dir = temp_dir("jobs-board-apart");
  std::ofstream(dir + "/small.yaml") << "name: small\ncluster: {preset: dgx-h100, nodes: 1}\n"
                                        "model: {preset: gpt3-1.3b, layers: 4}\ntraining: {global_batch: 8}\n";
  std::ofstream(dir + "/big.yaml") << "name: big\ncluster: {preset: dgx-h100, nodes: 8}\n"
                                      "model: {preset: gpt3-1.3b, layers: 4}\ntraining: {global_batch: 64}\n";
  std::ofstream(dir + "/jobs.yaml")
      << "cluster: {preset: dgx-h100, nodes: 9}\njobs:\n"
         "  - {scenario: small.yaml, first_node: 0}\n  - {scenario: big.yaml, first_node: 1}\n";
  const JobsOutcome o = run_jobs(load_scenario(dir + "/jobs.yaml"));
  ASSERT_EQ(o.jobs.size(), 2u);
  EXPECT_DOUBLE_EQ(o.jobs[0].shared, o.jobs[0].alone);
  EXPECT_DOUBLE_EQ(o.jobs[0].slowdown(), 1.0);
  EXPECT_EQ(o.jobs[0].name, "small");
}

// One scenario placed twice: its rows are told apart by their place.
TEST(Jobs, TwoJobsOfOneNameAreToldApart) {
  const JobsOutcome o = run_jobs(load_scenario(write_files(
      "jobs-twice", "jobs:\n  - {scenario: a.yaml, first_node: 0}\n  - {scenario: a.yaml, first_node: 2}\n")));
  ASSERT_EQ(o.jobs.size(), 2u);
  EXPECT_EQ(o.jobs[0].name, "a #1");
  EXPECT_EQ(o.jobs[1].name, "a #2");
}

TEST(Jobs, PlacementsAreChecked) {
  for (const std::string& bad :
       {std::string("jobs:\n  - {scenario: a.yaml, nodes: [0, 1]}\n  - {scenario: b.yaml, nodes: [1, 2]}\n"),
        std::string("jobs:\n  - {scenario: a.yaml, first_node: 3}\n"),
        std::string("jobs:\n  - {scenario: a.yaml, nodes: [0]}\n"),
        std::string("jobs:\n  - {scenario: a.yaml}\nmodel: {preset: gpt3-1.3b}\n"),
        std::string("jobs:\n  - {scenario: a.yaml}\noutput: {sqlite: x.sqlite}\n"),
        std::string("jobs:\n  - {first_node: 0}\n"),
        // placed twice: by its list and by a first node that would be dropped
        std::string("jobs:\n  - {scenario: a.yaml, nodes: [0, 1], first_node: 1}\n")}) {
    EXPECT_THROW(run_jobs(load_scenario(write_files("jobs-bad", bad))), InputError) << bad;
  }
  // Each message names what is wrong, where: a node a job lists twice, a job file that is
  // not there (marked at its entry in the jobs: file).
  auto message = [](const std::string& block) {
    try {
      run_jobs(load_scenario(write_files("jobs-msg", block)));
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message("jobs:\n  - {scenario: a.yaml, nodes: [0, 0]}\n").find("lists node 0 twice"), std::string::npos);
  const std::string missing = message("jobs:\n  - {scenario: gone.yaml, first_node: 0}\n");
  EXPECT_NE(missing.find("jobs.yaml:3:5: error: job scenario 'gone.yaml' does not exist"), std::string::npos)
      << missing;
}

// A job's scenario path is relative to the file that names it, whatever the working folder.
TEST(Jobs, AJobsPathIsRelativeToItsFile) {
  const std::string path = write_files("jobs-relative", "jobs:\n  - {scenario: a.yaml, first_node: 0}\n");
  const std::string dir = temp_dir("jobs-elsewhere");
  std::ofstream(dir + "/a.yaml") << "name: elsewhere\ncluster: {preset: dgx-h100, nodes: 1, gpus_per_node: 1}\n"
                                    "model: {preset: gpt3-1.3b, layers: 2}\ntraining: {global_batch: 1}\n";
  const fs::path before = fs::current_path();
  fs::current_path(dir);  // a.yaml here is another job
  const JobsOutcome o = run_jobs(load_scenario(path));
  fs::current_path(before);
  ASSERT_EQ(o.jobs.size(), 1u);
  EXPECT_EQ(o.jobs[0].name, "a");
}

// A disaggregated serving job's KV transfers cross the same up-links as a training job's
// all-reduce: both are slower than alone, and the serving job keeps its own event loop.
TEST(Jobs, TrainingBesideServing) {
  const std::string dir = temp_dir("jobs-mixed");
  std::ofstream(dir + "/train.yaml") << "cluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: gpt3-1.3b}\n"
                                        "parallel: {dp: 16}\ntraining: {global_batch: 16}\n";
  std::ofstream(dir + "/serve.yaml")
      << "cluster: {preset: dgx-h100, nodes: 2}\nmodel: {preset: llama3-70b}\nparallel: {tp: 4}\n"
         "inference: {requests: 300, arrivals: {rate_per_s: 4}, prompt_tokens: {dist: fixed, value: 4096},\n"
         "  output_tokens: {dist: fixed, value: 64}, disaggregation: {prefill_replicas: 2, decode_replicas: 2}}\n";
  std::ofstream(dir + "/jobs.yaml")
      << "cluster: {preset: dgx-h100, nodes: 4, scale_out: {topology: fat-tree, nics_per_leaf: 16, "
         "oversubscription: 8}}\njobs:\n  - {scenario: train.yaml, nodes: [0, 2]}\n"
         "  - {scenario: serve.yaml, nodes: [1, 3]}\n";
  const JobsOutcome o = run_jobs(load_scenario(dir + "/jobs.yaml"));
  ASSERT_EQ(o.jobs.size(), 2u);
  EXPECT_EQ(o.jobs[1].kind, "serving");
  EXPECT_GT(o.jobs[0].slowdown(), 1.01);
  EXPECT_GE(o.jobs[1].slowdown(), 1.0);
  EXPECT_GT(o.jobs[1].alone, 0);
}

}  // namespace
}  // namespace clustersim
