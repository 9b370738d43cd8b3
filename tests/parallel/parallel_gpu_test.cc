// The equivalence of parallel_equivalence_test on GPUs: 2 ranks, one GPU each,
// NCCL, the CUDA backend (bf16 tensor-core GEMMs with fp32 accumulation and
// fp32 storage). Tolerances: per-step losses within 1e-3 relative of the
// 1-GPU run, final parameters within 2e-3 absolute — bf16 rounding of GEMM
// inputs is identical across runs, so what differs is fp32 accumulation order
// over different batch splits, amplified by ten Adam steps.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include <gtest/gtest.h>

#include "models/cuda_backend.h"
#include "tests/parallel/param_file.h"
#include "tests/parallel/rank_launcher.h"

namespace cohort::parallel {
namespace {

namespace fs = std::filesystem;

std::vector<double> losses_of(const std::string& prefix) {
  std::vector<double> out;
  std::ifstream in(prefix + ".rank0.losses");
  int step;
  double loss, norm;
  while (in >> step >> loss >> norm) out.push_back(loss);
  return out;
}

std::string run_gpu(const std::string& strategy, int world, int tp, int micro) {
  fs::path dir = fs::temp_directory_path() / ("cohort_parallel_gpu_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string prefix = (dir / (strategy + "_w" + std::to_string(world) + "_tp" + std::to_string(tp))).string();
  auto group = testing::start_ranks(std::string(COHORT_BINARY_DIR) + "/tests/parallel_worker",
                                    {strategy, std::to_string(tp), "8", std::to_string(micro), "10", prefix}, world,
                                    {{"COHORT_TEST_DEVICE", "cuda"}, {"CUDA_VISIBLE_DEVICES", "0,1"}});
  EXPECT_EQ(testing::wait_ranks(group), "") << strategy;
  return prefix;
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
  static std::string reference_prefix = run_gpu("ddp", 1, 1, 8);
  static std::vector<double> reference = losses_of(reference_prefix);
  std::string prefix = run_gpu(strategy, 2, tp, tp == 1 ? 4 : 8);
  auto got = losses_of(prefix);
  std::map<std::string, std::vector<float>> want_params, got_params;
  testing::read_params(reference_prefix + ".tp0.params", &want_params);
  for (int t = 0; t < tp; ++t) testing::read_params(prefix + ".tp" + std::to_string(t) + ".params", &got_params);
  EXPECT_LE(testing::max_param_difference(want_params, got_params), 2e-3) << strategy;
  ASSERT_EQ(reference.size(), 10u);
  ASSERT_EQ(got.size(), 10u);
  for (size_t s = 0; s < got.size(); ++s)
    EXPECT_NEAR(got[s], reference[s], 1e-3 * std::abs(reference[s])) << strategy << " step " << s + 1;
}

INSTANTIATE_TEST_SUITE_P(Strategies, GpuEquivalence,
                         ::testing::Values(std::make_pair("ddp", 1), std::make_pair("zero1", 1),
                                           std::make_pair("zero2", 1), std::make_pair("zero3", 1),
                                           std::make_pair("fsdp2", 1), std::make_pair("ddp", 2)),
                         [](const auto& info) { return info.param.first + "_tp" + std::to_string(info.param.second); });

}  // namespace
}  // namespace cohort::parallel
