// Mixed precision in the data-parallel engine, with real processes over Gloo:
//  - zero3/fsdp2 with bf16 parameter all-gathers match 1 rank gathering the
//    same way (the rounding is elementwise, so sharding must not change it),
//    and differ from fp32 gathers (so the bf16 path is really taken);
//  - a loss scale multiplied into the loss is divided out exactly;
//  - fp16 GEMMs (emulated on CPU) with a loss scale and fp16 gathers give the
//    same training on 2 ranks as on 1;
//  - a step with non-finite gradients is skipped on every rank, training
//    carries on;
//  - the 16-bit working copies that ddp/zero1/zero2 keep (rewritten by
//    AdamW, refreshed after gathers) give exactly the training that rounding
//    the fp32 masters at every use gives.
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "tests/parallel/worker_run.h"

namespace cohort::parallel {
namespace {

using testing::Env;
using testing::WorkerRun;
using testing::expect_same_training;

constexpr int kSteps = 10;
constexpr int kGlobalBatch = 8;

WorkerRun run(const std::string& tag, const std::string& strategy, int world, int micro, const Env& env) {
  return testing::run_worker(tag, strategy, world, 1, kGlobalBatch, micro, kSteps, env);
}

TEST(MixedPrecision, Bf16ParameterGathersMatchOneRankAndDifferFromFp32) {
  Env bf16 = {{"COHORT_TEST_PARAM_DTYPE", "bf16"}};
  WorkerRun reference = run("bf16", "zero3", 1, kGlobalBatch, bf16);
  // Losses as tight as fp32's. Parameters: a master that sits within
  // summation-order noise (1e-7) of a bf16 rounding boundary rounds the other
  // way on N ranks, a one-ulp (2^-8 relative) change in one working weight,
  // which moves the parameters by ~1e-4 over ten steps; which masters sit on
  // a boundary depends on the CPU's GEMM kernels, and on some CPUs two or
  // three flips add up to ~5e-4.
  for (std::string strategy : {"zero3", "fsdp2"})
    for (int world : {2, 4})
      expect_same_training(reference, run("bf16", strategy, world, kGlobalBatch / world / 2, bf16), 1e-5, 1e-3,
                           strategy + " world " + std::to_string(world) + " bf16 gathers");
  WorkerRun fp32 = run("fp32", "zero3", 1, kGlobalBatch, {});
  double largest = 0;
  for (int s = 0; s < kSteps; ++s)
    largest = std::max(largest, std::abs(fp32.losses[s] - reference.losses[s]) / std::abs(fp32.losses[s]));
  EXPECT_GT(largest, 1e-5) << "bf16-rounded parameters should change the losses";
  EXPECT_LT(largest, 1e-2) << "but only by rounding";
}

TEST(MixedPrecision, LossScaleIsDividedOut) {
  WorkerRun unscaled = run("unscaled", "ddp", 1, kGlobalBatch, {});
  for (std::string strategy : {"ddp", "zero2", "fsdp2"})
    expect_same_training(unscaled, run("scaled", strategy, 2, 2, {{"COHORT_TEST_LOSS_SCALE", "1024"}}), 1e-5, 1e-5,
                         strategy + " loss scale 1024");
}

TEST(MixedPrecision, Fp16GemmsWithLossScaleMatchOneRank) {
  Env fp16 = {{"COHORT_TEST_MATMUL", "fp16"}, {"COHORT_TEST_LOSS_SCALE", "65536"}};
  WorkerRun reference = run("fp16", "ddp", 1, kGlobalBatch, fp16);
  for (bool applied : reference.applied) EXPECT_TRUE(applied);
  Env fp16_gathers = fp16;
  fp16_gathers.push_back({"COHORT_TEST_PARAM_DTYPE", "fp16"});
  // Operands that differ in their last fp32 bits (summation order) can
  // round to neighbouring fp16 values; Adam normalises the gradients, so for
  // gradients near zero that can change a step by up to lr (1e-3): losses
  // within 1e-4, parameters within a few such steps.
  expect_same_training(reference, run("fp16", "ddp", 2, 4, fp16), 1e-4, 5e-3, "ddp fp16");
  WorkerRun reference_gathers = run("fp16_gathers", "zero3", 1, kGlobalBatch, fp16_gathers);
  expect_same_training(reference_gathers, run("fp16_gathers", "fsdp2", 2, 2, fp16_gathers), 1e-4, 5e-3,
                       "fsdp2 fp16 with fp16 gathers");
}

TEST(MixedPrecision, NonFiniteGradientsSkipTheStepEverywhere) {
  WorkerRun clean = run("clean", "ddp", 1, kGlobalBatch, {});
  for (std::string strategy : {"ddp", "zero2", "fsdp2"}) {
    WorkerRun poisoned = run("poison", strategy, 2, 4, {{"COHORT_TEST_POISON_STEP", "3"}});
    ASSERT_EQ(poisoned.losses.size(), size_t(kSteps)) << strategy;
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_EQ(poisoned.applied[s], s != 2) << strategy << " step " << s + 1;
      EXPECT_TRUE(std::isfinite(poisoned.losses[s])) << strategy << " step " << s + 1;
    }
    // Up to the poisoned step the run is the clean one; the skip leaves the
    // parameters as they were, so step 4 starts from step 2's result.
    for (int s = 0; s < 3; ++s) EXPECT_NEAR(poisoned.losses[s], clean.losses[s], 1e-5 * clean.losses[s]) << strategy;
    EXPECT_NE(poisoned.losses[3], clean.losses[3]) << strategy;
    for (const auto& [name, values] : poisoned.params)
      for (float v : values) ASSERT_TRUE(std::isfinite(v)) << strategy << " " << name;
  }
}

TEST(MixedPrecision, WorkingWeightsEqualRoundingTheMastersAtEveryUse) {
  Env fp16 = {{"COHORT_TEST_MATMUL", "fp16"}, {"COHORT_TEST_LOSS_SCALE", "1024"}};
  Env without = fp16;
  without.push_back({"COHORT_TEST_NO_WORKING_WEIGHTS", "1"});
  for (std::string strategy : {"ddp", "zero1", "zero2"}) {
    WorkerRun kept = run("working", strategy, 2, 2, fp16);
    WorkerRun rounded = run("rounded", strategy, 2, 2, without);
    expect_same_training(rounded, kept, 0, 0, strategy + " with working weights");
  }
}

}  // namespace
}  // namespace cohort::parallel
