// The debugging switches read from the environment (worker/debug_switches.h):
// COHORT_TRAIN_BLOCKS's three values and a bad one named in the error.
#include "worker/debug_switches.h"

#include <stdlib.h>

#include <gtest/gtest.h>

namespace cohort::worker {
namespace {

class DebugSwitchesEnv : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("COHORT_TRAIN_BLOCKS"); }
};

TEST_F(DebugSwitchesEnv, TrainBlocksChoosesOpsFusedOrSparseLayersToo) {
  unsetenv("COHORT_TRAIN_BLOCKS");
  auto unset = read_debug_switches();
  ASSERT_TRUE(unset.is_ok()) << unset.status().to_string();
  EXPECT_TRUE(unset->fused_training_blocks);
  EXPECT_FALSE(unset->fused_moe_blocks);
  setenv("COHORT_TRAIN_BLOCKS", "ops", 1);
  auto ops = read_debug_switches();
  ASSERT_TRUE(ops.is_ok());
  EXPECT_FALSE(ops->fused_training_blocks);
  EXPECT_FALSE(ops->fused_moe_blocks);
  setenv("COHORT_TRAIN_BLOCKS", "moe", 1);
  auto moe = read_debug_switches();
  ASSERT_TRUE(moe.is_ok());
  EXPECT_TRUE(moe->fused_training_blocks);
  EXPECT_TRUE(moe->fused_moe_blocks);
  setenv("COHORT_TRAIN_BLOCKS", "sparse", 1);
  auto bad = read_debug_switches();
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("COHORT_TRAIN_BLOCKS='sparse'"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("ops, fused, moe"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace cohort::worker
