// plan_elastic_batch: an elastic training job keeps its global batch across
// world sizes by changing accumulation, unless it opts in to scaling; a node
// count that cannot keep it is never placed, and none at all is an error.
#include "coordinator/elastic_batch.h"

#include <gtest/gtest.h>

#include "jobs/load.h"
#include "tests/jobs/job_files.h"

namespace cohort::coordinator {
namespace {

std::string elastic_train(int min, int max, const std::string& elastic_batch = "keep", int global_batch = 0) {
  auto spec = jobs::testing::train_job("elastic", min, 1);
  spec.job.nodes = {min, max};
  spec.train.micro_batch = 8;
  spec.train.global_batch = global_batch;
  spec.train.elastic_batch = elastic_batch;
  return jobs::to_toml(spec);
}

int global_batch_of(const std::string& toml) {
  return jobs::testing::loaded_spec(toml).train.global_batch;
}

TEST(ElasticBatch, AShrunkJobKeepsTheBatchOfItsMaxNodesWithMoreAccumulation) {
  auto plan = plan_elastic_batch(elastic_train(1, 2), 1);
  ASSERT_TRUE(plan) << plan.status().message();
  EXPECT_EQ(plan->nodes, 1);
  EXPECT_EQ(plan->global_batch, 16);
  EXPECT_EQ(plan->accumulation, 2);
  EXPECT_EQ(global_batch_of(plan->launch_toml), 16) << "the worker's file carries the kept batch";
  EXPECT_EQ(plan->note, "global batch 16 kept at 1 node(s): gradient accumulation 2 (micro_batch 8 × data-parallel 1)");
  auto full = plan_elastic_batch(elastic_train(1, 2), 5);  // more fit than the job takes
  ASSERT_TRUE(full);
  EXPECT_EQ(full->nodes, 2);
  EXPECT_EQ(full->accumulation, 1);
}

TEST(ElasticBatch, AnExplicitGlobalBatchIsKeptToo) {
  auto plan = plan_elastic_batch(elastic_train(1, 2, "keep", 64), 1);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->nodes, 1);
  EXPECT_EQ(plan->global_batch, 64);
  EXPECT_EQ(plan->accumulation, 8);
}

TEST(ElasticBatch, ANodeCountThatCannotKeepTheBatchIsPassedOverForFewer) {
  auto plan = plan_elastic_batch(elastic_train(2, 4), 3);  // 32 over 3 × 8 does not divide
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->nodes, 2);
  EXPECT_EQ(plan->accumulation, 2);
  EXPECT_NE(plan->note.find("3 node(s) fit, but cannot keep it"), std::string::npos) << plan->note;
}

TEST(ElasticBatch, NoNodeCountThatKeepsTheBatchIsAnErrorNamingTheFix) {
  auto plan = plan_elastic_batch(elastic_train(2, 3), 2);  // 24 over 2 × 8
  ASSERT_FALSE(plan);
  EXPECT_EQ(plan.status().code(), StatusCode::kFailedPrecondition);
  const std::string& m = plan.status().message();
  EXPECT_NE(m.find("train.global_batch 24 (micro_batch × data-parallel degree at 3 nodes) cannot be kept"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("2 (micro_batch 8 × data-parallel 2 = 16)"), std::string::npos) << m;
  EXPECT_NE(m.find("train.elastic_batch = \"scale\""), std::string::npos) << m;
}

TEST(ElasticBatch, ScaleLetsTheBatchFollowTheWorldSize) {
  std::string toml = elastic_train(1, 2, "scale");
  auto plan = plan_elastic_batch(toml, 1);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->nodes, 1);
  EXPECT_EQ(plan->global_batch, 0);
  EXPECT_EQ(plan->launch_toml, toml);
  EXPECT_NE(plan->note.find("global batch 8 at 1 node(s): it follows the world size"), std::string::npos)
      << plan->note;
}

TEST(ElasticBatch, FixedSizeAndCommandJobsPassThrough) {
  std::string fixed = jobs::to_toml(jobs::testing::train_job("fixed", 2, 1));
  auto plan = plan_elastic_batch(fixed, 2);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->launch_toml, fixed);
  EXPECT_TRUE(plan->note.empty());
  auto command = jobs::testing::command_job("cmd", 1, 1);
  command.job.nodes = {1, 3};
  plan = plan_elastic_batch(jobs::to_toml(command), 2);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->nodes, 2);
  EXPECT_EQ(plan->global_batch, 0);
}

}  // namespace
}  // namespace cohort::coordinator
