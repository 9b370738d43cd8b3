#include "jobs/rank_plan.h"

#include <gtest/gtest.h>

namespace cohort::jobs {
namespace {

TEST(RankPlan, TwoNodesOfFourWithTensorParallelTwo) {
  auto plan = plan_ranks(2, 4, 2);
  ASSERT_EQ(plan.size(), 8u);
  // rank = node_rank * gpus_per_node + local_rank; tp groups are rank pairs.
  const int expect[8][5] = {{0, 0, 0, 0, 0}, {1, 0, 1, 0, 1}, {2, 0, 2, 1, 0}, {3, 0, 3, 1, 1},
                            {4, 1, 0, 2, 0}, {5, 1, 1, 2, 1}, {6, 1, 2, 3, 0}, {7, 1, 3, 3, 1}};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(plan[i].rank, expect[i][0]);
    EXPECT_EQ(plan[i].node_rank, expect[i][1]);
    EXPECT_EQ(plan[i].local_rank, expect[i][2]);
    EXPECT_EQ(plan[i].dp_rank, expect[i][3]);
    EXPECT_EQ(plan[i].tp_rank, expect[i][4]);
  }
  auto text = format_rank_plan(plan, 2);
  EXPECT_NE(text.find("8 ranks = data-parallel 4 × tensor-parallel 2"), std::string::npos);
}

TEST(RankPlan, TensorParallelGroupsNeverCrossNodes) {
  auto plan = plan_ranks(3, 4, 4);
  for (const auto& r : plan) EXPECT_EQ(r.dp_rank, r.node_rank);
}

}  // namespace
}  // namespace cohort::jobs
