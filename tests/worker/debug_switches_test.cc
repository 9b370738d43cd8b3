// The debugging switches read from the environment (worker/debug_switches.h):
// COHORT_TRAIN_BLOCKS's three values (fused, with sparse layers, by default) and a bad one named in the error;
// COHORT_INFER_LORA_RUN_ROWS reaching the graph engine's overrides, and a value that is not a count refused;
// COHORT_INFER_LORA_PROMPT's two forms and the engine's default when unset; COHORT_INFER_LORA_DECODE and
// COHORT_INFER_LORA_SIDE_STREAM likewise.
#include "worker/debug_switches.h"

#include <stdlib.h>

#include <string>

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
  // The switches read with `name` set to `value`; the read must succeed.
  static DebugSwitches read_with(const char* name, const char* value) {
    setenv(name, value, 1);
    auto switches = read_debug_switches();
    EXPECT_TRUE(switches.is_ok()) << name << "=" << value << ": " << switches.status().to_string();
    return switches.is_ok() ? *switches : DebugSwitches{};
  }
  // `name` set to `value` is refused, and the error names both.
  static void expect_refused(const char* name, const char* value) {
    setenv(name, value, 1);
    auto switches = read_debug_switches();
    ASSERT_FALSE(switches.is_ok()) << name << "=" << value << " was accepted";
    const std::string named = std::string(name) + "='" + value + "'";
    EXPECT_NE(switches.status().message().find(named), std::string::npos) << switches.status().message();
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
  EXPECT_EQ(read_with("COHORT_INFER_LORA_PROMPT", "kernels").decode.lora_dense, false);
  EXPECT_EQ(read_with("COHORT_INFER_LORA_PROMPT", "dense").decode.lora_dense, true);
  expect_refused("COHORT_INFER_LORA_PROMPT", "gemm");
  unsetenv("COHORT_INFER_LORA_PROMPT");
  EXPECT_FALSE(unset->decode.lora_dense_decode.has_value());  // the engine's rule
  EXPECT_EQ(read_with("COHORT_INFER_LORA_DECODE", "dense").decode.lora_dense_decode, true);
  EXPECT_EQ(read_with("COHORT_INFER_LORA_DECODE", "kernel").decode.lora_dense_decode, false);
  expect_refused("COHORT_INFER_LORA_DECODE", "rows");
  unsetenv("COHORT_INFER_LORA_DECODE");
  EXPECT_FALSE(unset->decode.lora_side_stream.has_value());  // the engine's default: on
  EXPECT_EQ(read_with("COHORT_INFER_LORA_SIDE_STREAM", "off").decode.lora_side_stream, false);
  EXPECT_EQ(read_with("COHORT_INFER_LORA_SIDE_STREAM", "on").decode.lora_side_stream, true);
  expect_refused("COHORT_INFER_LORA_SIDE_STREAM", "1");
}

}  // namespace
}  // namespace cohort::worker
