// The decoder spec × the CUDA executors (label gpu): for every spec feature,
// the fused CUDA training blocks (or the op-by-op path they hand it to, as
// their support table says) and the bf16 CUDA decode engine give the CPU
// reference's logits within bf16 rounding. Skips, saying why, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "models/cuda_backend.h"
#include "models/decode/cuda_graph_engine.h"
#include "tests/models/spec_configs.h"

namespace cohort::models {
namespace {

using testing::init_spec_weights;
using testing::spec_config_with;
using testing::spec_tokens;

constexpr int kTokens = 24;

struct Reference {
  std::unique_ptr<Backend> backend = make_cpu_backend();
  std::unique_ptr<Model> model;
  std::vector<float> logits;  // [kTokens, vocab]
};

Reference reference(const ModelConfig& config, const std::vector<int32_t>& tokens) {
  Reference r;
  r.model = std::move(Model::create(config, ShardSpec{}, r.backend.get()).value());
  init_spec_weights(*r.model, 5);
  r.model->forward(tokens.data(), nullptr, 1, kTokens);
  r.logits.assign(r.model->logits(), r.model->logits() + size_t(kTokens) * config.vocab_size);
  return r;
}

// Largest difference over the largest reference magnitude.
double relative_error(const float* got, const float* want, size_t n) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < n; ++i) {
    diff = std::max(diff, double(std::fabs(got[i] - want[i])));
    scale = std::max(scale, double(std::fabs(want[i])));
  }
  return diff / std::max(scale, 1e-6);
}

class SpecOnCuda : public ::testing::TestWithParam<SpecFeature> {
 protected:
  void SetUp() override {
    if (cuda_device_count() < 1) GTEST_SKIP() << "needs a GPU, found none (run on the GPU machine: ctest -L gpu)";
  }
};

TEST_P(SpecOnCuda, TrainingForwardMatchesTheReference) {
  const SpecFeature f = GetParam();
  const ModelConfig config = spec_config_with(f);
  const auto tokens = spec_tokens(kTokens, config.vocab_size);
  Reference ref = reference(config, tokens);
  auto gpu = std::move(make_cuda_backend(0).value());
  gpu->set_matmul_precision(MatmulPrecision::kBf16);
  auto model = std::move(Model::create(config, ShardSpec{}, gpu.get()).value());
  for (int g = 0; g < model->num_groups(); ++g) {
    gpu->copy_from_host(model->params(g), ref.model->params(g), model->layout().groups[g].numel * 4);
  }
  model->forward(tokens.data(), nullptr, 1, kTokens);
  const bool fused_expected = executor_support(Executor::kCudaTrainBlocks, f) == Support::kRuns &&
                              gpu->attention_runs_fused(config.head_dim);
  EXPECT_EQ(model->runs_fused_blocks(), fused_expected) << to_string(f);
  std::vector<float> got(ref.logits.size());
  gpu->copy_to_host(got.data(), model->logits(), got.size() * 4);
  const double err = relative_error(got.data(), ref.logits.data(), got.size());
  std::printf("spec %-24s training on CUDA (%s): relative error %.2e\n", to_string(f),
              model->runs_fused_blocks() ? "fused blocks" : "op by op", err);
  EXPECT_LT(err, 3e-2) << to_string(f);
}

TEST_P(SpecOnCuda, DecodeEngineMatchesTheReference) {
  const SpecFeature f = GetParam();
  const ModelConfig config = spec_config_with(f);
  const int V = config.vocab_size;
  const auto tokens = spec_tokens(kTokens, V);
  Reference ref = reference(config, tokens);
  decode::CudaEngineOptions options;
  options.slots = 1;
  options.capacity = kTokens;
  auto engine = decode::make_cuda_graph_engine(config, options, nullptr, [&](Model& m) {
    for (int g = 0; g < m.num_groups(); ++g) {
      std::memcpy(m.params(g), ref.model->params(g), m.layout().groups[g].numel * 4);
    }
    return Status::ok();
  });
  if (executor_support(Executor::kCudaDecode, f) != Support::kRuns) {
    ASSERT_FALSE(engine.is_ok());
    EXPECT_NE(engine.status().message().find(to_string(f)), std::string::npos) << engine.status().message();
    return;
  }
  ASSERT_TRUE(engine.is_ok()) << engine.status().message();
  const int prompt = 12;
  std::vector<float> got(V);
  double worst = 0;
  (*engine)->prefill(0, tokens.data(), prompt, got.data(), nullptr);
  worst = std::max(worst, relative_error(got.data(), &ref.logits[size_t(prompt - 1) * V], V));
  for (int t = prompt; t < kTokens; ++t) {
    const int slot = 0;
    (*engine)->decode(&slot, &tokens[t], 1, got.data(), nullptr);
    worst = std::max(worst, relative_error(got.data(), &ref.logits[size_t(t) * V], V));
  }
  std::printf("spec %-24s bf16 decode engine: relative error %.2e\n", to_string(f), worst);
  EXPECT_LT(worst, 3e-2) << to_string(f);
}

INSTANTIATE_TEST_SUITE_P(All, SpecOnCuda, ::testing::ValuesIn(kAllSpecFeatures), [](const auto& info) {
  std::string n = to_string(info.param);
  for (char& ch : n) if (ch == ' ') ch = '_';
  return n;
});

}  // namespace
}  // namespace cohort::models
