// The equivalence of parallel_equivalence_test on GPUs: 2 ranks, one GPU each,
// NCCL, the CUDA backend (bf16 tensor-core GEMMs with fp32 accumulation and
// fp32 storage); then the same with bf16 parameter gathers (zero3, fsdp2) and
// with fp16 GEMMs under a loss scale. Tolerances: per-step losses within 1e-3
// relative of the 1-GPU run; final parameters within 5e-3 absolute. What
// differs between the runs is the fp32 accumulation order (other batch
// splits, tp's split sums); operands a last bit apart can round to
// neighbouring 16-bit values, and Adam, which normalises gradients, turns
// that into up to lr (1e-3) per step for gradients near zero — so parameters
// may differ by a few such steps after ten.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include <gtest/gtest.h>

#include "models/cuda_backend.h"
#include "tests/parallel/worker_run.h"

namespace cohort::parallel {
namespace {

testing::WorkerRun run_gpu(const std::string& tag, const std::string& strategy, int world, int tp, int micro,
                           testing::Env env = {}) {
  env.push_back({"COHORT_TEST_DEVICE", "cuda"});
  env.push_back({"CUDA_VISIBLE_DEVICES", "0,1"});
  return testing::run_worker("gpu_" + tag, strategy, world, tp, 8, micro, 10, env);
}

void expect_close(const testing::WorkerRun& want, const testing::WorkerRun& got, const std::string& what) {
  ASSERT_EQ(want.losses.size(), 10u) << what;
  testing::expect_same_training(want, got, 1e-3, 5e-3, what);
}

class GpuEquivalence : public ::testing::TestWithParam<std::pair<std::string, int>> {
 protected:
  void SetUp() override {
    if (models::cuda_device_count() < 2)
      GTEST_SKIP() << "needs 2 GPUs (this machine sees " << models::cuda_device_count() << "); run on the GPU machine";
  }
};

TEST_P(GpuEquivalence, TwoGpusMatchOne) {
  auto [strategy, tp] = GetParam();
  static testing::WorkerRun reference = run_gpu("fp32_gather", "ddp", 1, 1, 8);
  expect_close(reference, run_gpu("fp32_gather", strategy, 2, tp, tp == 1 ? 4 : 8), strategy);
}

// bf16 parameter all-gathers (FSDP2's default mixed-precision policy on GPU):
// 2 GPUs against 1 GPU gathering the same way.
TEST_P(GpuEquivalence, Bf16GathersTwoGpusMatchOne) {
  auto [strategy, tp] = GetParam();
  if (strategy != "zero3" && strategy != "fsdp2") GTEST_SKIP() << strategy << " keeps full fp32 parameters";
  testing::Env env = {{"COHORT_TEST_PARAM_DTYPE", "bf16"}};
  static testing::WorkerRun reference = run_gpu("bf16_gather", "zero3", 1, 1, 8, env);
  expect_close(reference, run_gpu("bf16_gather", strategy, 2, tp, 4, env), strategy + " bf16 gathers");
}

// fp16 GEMMs with a loss scale of 2^12 on 2 GPUs against 1 GPU.
TEST_P(GpuEquivalence, Fp16WithLossScaleTwoGpusMatchOne) {
  auto [strategy, tp] = GetParam();
  testing::Env env = {{"COHORT_TEST_MATMUL", "fp16"}, {"COHORT_TEST_LOSS_SCALE", "4096"}};
  static testing::WorkerRun reference = run_gpu("fp16", "ddp", 1, 1, 8, env);
  for (bool applied : reference.applied) EXPECT_TRUE(applied);
  expect_close(reference, run_gpu("fp16", strategy, 2, tp, tp == 1 ? 4 : 8, env), strategy + " fp16");
}

INSTANTIATE_TEST_SUITE_P(Strategies, GpuEquivalence,
                         ::testing::Values(std::make_pair("ddp", 1), std::make_pair("zero1", 1),
                                           std::make_pair("zero2", 1), std::make_pair("zero3", 1),
                                           std::make_pair("fsdp2", 1), std::make_pair("ddp", 2)),
                         [](const auto& info) { return info.param.first + "_tp" + std::to_string(info.param.second); });

}  // namespace
}  // namespace cohort::parallel
