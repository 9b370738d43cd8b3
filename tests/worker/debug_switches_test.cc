// The debugging switches read from the environment (worker/debug_switches.h):
// COHORT_TRAIN_BLOCKS's three values (fused, with sparse layers, by default) and a bad one named in the error;
// COHORT_INFER_LORA_RUN_ROWS reaching the graph engine's overrides, and a value that is not a count refused;
// COHORT_INFER_LORA_PROMPT's two forms and the engine's default when unset; COHORT_INFER_LORA_DECODE and
// COHORT_INFER_LORA_SIDE_STREAM likewise.
#include "worker/debug_switches.h"

#include <stdlib.h>

#include <gtest/gtest.h>

namespace cohort::worker {
namespace {

class DebugSwitchesEnv : public ::testing::Test {
 protected:
  void TearDown() override {
    unsetenv("COHORT_TRAIN_BLOCKS");
    unsetenv("COHORT_INFER_LORA_RUN_ROWS");
    unsetenv("COHORT_INFER_LORA_PROMPT");
    unsetenv("COHORT_INFER_LORA_DECODE");
    unsetenv("COHORT_INFER_LORA_SIDE_STREAM");
  }
};

TEST_F(DebugSwitchesEnv, TrainBlocksChoosesOpsFusedOrSparseLayersToo) {
  unsetenv("COHORT_TRAIN_BLOCKS");
  auto unset = read_debug_switches();
  ASSERT_TRUE(unset.is_ok()) << unset.status().to_string();
  EXPECT_TRUE(unset->fused_training_blocks);
  EXPECT_TRUE(unset->fused_moe_blocks);
  setenv("COHORT_TRAIN_BLOCKS", "ops", 1);
  auto ops = read_debug_switches();
  ASSERT_TRUE(ops.is_ok());
  EXPECT_FALSE(ops->fused_training_blocks);
  EXPECT_FALSE(ops->fused_moe_blocks);
  setenv("COHORT_TRAIN_BLOCKS", "dense", 1);
  auto dense = read_debug_switches();
  ASSERT_TRUE(dense.is_ok());
  EXPECT_TRUE(dense->fused_training_blocks);
  EXPECT_FALSE(dense->fused_moe_blocks);
  setenv("COHORT_TRAIN_BLOCKS", "fused", 1);
  auto fused = read_debug_switches();
  ASSERT_TRUE(fused.is_ok());
  EXPECT_TRUE(fused->fused_training_blocks);
  EXPECT_TRUE(fused->fused_moe_blocks);
  setenv("COHORT_TRAIN_BLOCKS", "sparse", 1);
  auto bad = read_debug_switches();
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("COHORT_TRAIN_BLOCKS='sparse'"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("ops, dense, fused"), std::string::npos) << bad.status().message();
}

TEST_F(DebugSwitchesEnv, LoraRunRowsSetsTheEnginesThresholdOrIsRefusedByName) {
  unsetenv("COHORT_INFER_LORA_RUN_ROWS");
  auto unset = read_debug_switches();
  ASSERT_TRUE(unset.is_ok()) << unset.status().to_string();
  EXPECT_EQ(unset->decode.lora_run_rows, -1);  // the engine's default
  setenv("COHORT_INFER_LORA_RUN_ROWS", "0", 1);
  auto off = read_debug_switches();
  ASSERT_TRUE(off.is_ok()) << off.status().to_string();
  EXPECT_EQ(off->decode.lora_run_rows, 0);
  setenv("COHORT_INFER_LORA_RUN_ROWS", "256", 1);
  auto rows = read_debug_switches();
  ASSERT_TRUE(rows.is_ok()) << rows.status().to_string();
  EXPECT_EQ(rows->decode.lora_run_rows, 256);
  setenv("COHORT_INFER_LORA_RUN_ROWS", "many", 1);
  auto bad = read_debug_switches();
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("COHORT_INFER_LORA_RUN_ROWS"), std::string::npos) << bad.status().message();
}

TEST_F(DebugSwitchesEnv, LoraPromptPicksTheDenseFormOrTheKernels) {
  unsetenv("COHORT_INFER_LORA_PROMPT");
  auto unset = read_debug_switches();
  ASSERT_TRUE(unset.is_ok()) << unset.status().to_string();
  EXPECT_FALSE(unset->decode.lora_dense.has_value());  // the engine decides
  setenv("COHORT_INFER_LORA_PROMPT", "kernels", 1);
  auto kernels = read_debug_switches();
  ASSERT_TRUE(kernels.is_ok()) << kernels.status().to_string();
  EXPECT_EQ(kernels->decode.lora_dense, false);
  setenv("COHORT_INFER_LORA_PROMPT", "dense", 1);
  auto dense = read_debug_switches();
  ASSERT_TRUE(dense.is_ok()) << dense.status().to_string();
  EXPECT_EQ(dense->decode.lora_dense, true);
  setenv("COHORT_INFER_LORA_PROMPT", "gemm", 1);
  auto bad = read_debug_switches();
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("COHORT_INFER_LORA_PROMPT='gemm'"), std::string::npos) << bad.status().message();
  unsetenv("COHORT_INFER_LORA_PROMPT");
  EXPECT_FALSE(unset->decode.lora_dense_decode.has_value());  // the engine's rule
  setenv("COHORT_INFER_LORA_DECODE", "dense", 1);
  auto decode = read_debug_switches();
  ASSERT_TRUE(decode.is_ok()) << decode.status().to_string();
  EXPECT_EQ(decode->decode.lora_dense_decode, true);
  setenv("COHORT_INFER_LORA_DECODE", "kernel", 1);
  auto kernel = read_debug_switches();
  ASSERT_TRUE(kernel.is_ok()) << kernel.status().to_string();
  EXPECT_EQ(kernel->decode.lora_dense_decode, false);
  setenv("COHORT_INFER_LORA_DECODE", "rows", 1);
  auto bad_decode = read_debug_switches();
  ASSERT_FALSE(bad_decode.is_ok());
  EXPECT_NE(bad_decode.status().message().find("COHORT_INFER_LORA_DECODE='rows'"), std::string::npos);
  unsetenv("COHORT_INFER_LORA_DECODE");
  EXPECT_FALSE(unset->decode.lora_side_stream.has_value());  // the engine's default: on
  setenv("COHORT_INFER_LORA_SIDE_STREAM", "off", 1);
  auto one_stream = read_debug_switches();
  ASSERT_TRUE(one_stream.is_ok()) << one_stream.status().to_string();
  EXPECT_EQ(one_stream->decode.lora_side_stream, false);
  setenv("COHORT_INFER_LORA_SIDE_STREAM", "1", 1);
  auto bad_side = read_debug_switches();
  ASSERT_FALSE(bad_side.is_ok());
  EXPECT_NE(bad_side.status().message().find("COHORT_INFER_LORA_SIDE_STREAM='1'"), std::string::npos);
}

}  // namespace
}  // namespace cohort::worker
