// The decoder spec × executors, on the CPU: every feature is named and has a
// declared support in every executor; an executor that lacks one refuses the
// model naming it; the CPU reference reads every feature (switching it
// changes the logits) and its KV decode gives its training forward's logits
// for each. spec_executors_gpu_test.cc runs the CUDA executors against it.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "models/kv_cache.h"
#include "tests/models/spec_configs.h"

namespace cohort::models {
namespace {

using cohort::testing::init_spec_weights;
using cohort::testing::spec_baseline_config;
using cohort::testing::spec_config_with;
using cohort::testing::spec_tokens;

std::string name_of(SpecFeature f) { return to_string(f); }

class SpecFeatures : public ::testing::TestWithParam<SpecFeature> {};

// Logits [T, vocab] of the training forward on the CPU reference.
std::vector<float> forward_logits(const ModelConfig& config, const std::vector<int32_t>& tokens) {
  auto backend = make_cpu_backend();
  auto model = Model::create(config, ShardSpec{}, backend.get());
  EXPECT_TRUE(model.is_ok()) << model.status().message();
  init_spec_weights(**model, 5);
  const int T = static_cast<int>(tokens.size());
  (*model)->forward(tokens.data(), nullptr, 1, T);
  const float* logits = (*model)->logits();
  return std::vector<float>(logits, logits + static_cast<size_t>(T) * config.vocab_size);
}

TEST(Spec, EveryFeatureIsNamedAndEveryExecutorDeclaresIt) {
  std::set<std::string> names;
  for (SpecFeature f : kAllSpecFeatures) {
    EXPECT_NE(name_of(f), "?");
    EXPECT_TRUE(names.insert(name_of(f)).second) << "two features named " << name_of(f);
    for (Executor e : kAllExecutors) {
      const Support s = executor_support(e, f);
      EXPECT_TRUE(s == Support::kRuns || s == Support::kOpByOp || s == Support::kRefused);
    }
    // The reference defines every feature.
    EXPECT_EQ(executor_support(Executor::kCpuReference, f), Support::kRuns) << name_of(f);
  }
}

TEST(Spec, AnExecutorThatLacksAFeatureRefusesTheModelNamingIt) {
  for (Executor e : kAllExecutors) {
    for (SpecFeature f : kAllSpecFeatures) {
      const DecoderSpec spec = DecoderSpec::of(spec_config_with(f));
      ASSERT_TRUE(spec.uses(f)) << name_of(f);
      const Status s = check_executor(e, spec);
      if (executor_support(e, f) == Support::kRuns) continue;
      ASSERT_FALSE(s.is_ok()) << to_string(e) << " accepted " << name_of(f);
      EXPECT_NE(s.message().find(name_of(f)), std::string::npos) << s.message();
      EXPECT_NE(s.message().find(to_string(e)), std::string::npos) << s.message();
    }
  }
  // The gaps today: the fused training blocks have no projection biases.
  const Status s = check_executor(Executor::kCudaTrainBlocks,
                                  DecoderSpec::of(spec_config_with(SpecFeature::kAttentionBias)));
  EXPECT_EQ(s.message(), "the fused CUDA training blocks lack attention_bias (models/spec.h)");
}

// A mixture of experts runs on every executor: the decode engine with its
// own kernels, the fused training blocks with their sparse layers
// (models/cuda/train_experts.cuh).
TEST(Spec, MixturesOfExpertsDecodeOnTheGraphEngineAndTrainInTheFusedBlocks) {
  const DecoderSpec moe = DecoderSpec::of(spec_config_with(SpecFeature::kMoeMlp));
  EXPECT_TRUE(moe.moe_mlp);
  EXPECT_EQ(executor_support(Executor::kCpuReference, moe), Support::kRuns);
  EXPECT_EQ(executor_support(Executor::kCudaDecode, moe), Support::kRuns);
  EXPECT_TRUE(check_executor(Executor::kCudaDecode, moe).is_ok());
  EXPECT_EQ(executor_support(Executor::kCudaTrainBlocks, moe), Support::kRuns);
  EXPECT_TRUE(check_executor(Executor::kCudaTrainBlocks, moe).is_ok());
  EXPECT_EQ(executor_support(Executor::kCudaDecode, DecoderSpec::of(spec_baseline_config())), Support::kRuns);
  EXPECT_FALSE(DecoderSpec::of(spec_baseline_config()).moe_mlp);
}

TEST(Spec, TheBaselineUsesOnlyTheFeaturesEveryDecoderHas) {
  const DecoderSpec spec = DecoderSpec::of(spec_baseline_config());
  std::vector<std::string> used;
  for (SpecFeature f : spec.features()) used.push_back(name_of(f));
  EXPECT_EQ(used, (std::vector<std::string>{"rms_norm", "rope", "swiglu_mlp"}));
}

// Switching the feature changes the reference's logits: it is read, not
// ignored.
TEST_P(SpecFeatures, TheReferenceReadsIt) {
  const auto tokens = spec_tokens(24, 96);
  const auto off = forward_logits(spec_baseline_config(), tokens);
  const auto on = forward_logits(spec_config_with(GetParam()), tokens);
  ASSERT_EQ(off.size(), on.size());
  double diff = 0;
  for (size_t i = 0; i < on.size(); ++i) diff = std::max(diff, double(std::fabs(on[i] - off[i])));
  EXPECT_GT(diff, 1e-3) << name_of(GetParam()) << " changed no logit";
}

// The reference's KV decode (prefill, then one token at a time) gives the
// training forward's logits at every position.
TEST_P(SpecFeatures, KvDecodeGivesTheForwardsLogits) {
  const ModelConfig config = spec_config_with(GetParam());
  const int T = 20, V = config.vocab_size;
  const auto tokens = spec_tokens(T, V);
  const auto want = forward_logits(config, tokens);
  auto backend = make_cpu_backend();
  auto model = Model::create(config, ShardSpec{}, backend.get());
  ASSERT_TRUE(model.is_ok());
  init_spec_weights(**model, 5);
  auto cache = KvCache::create(**model, 1, T);
  ASSERT_TRUE(cache.is_ok()) << cache.status().message();
  std::vector<float> got(V);
  const int prompt = 8;
  (*model)->prefill(*cache, 0, tokens.data(), prompt, got.data());
  for (int t = prompt - 1; t < T; ++t) {
    if (t >= prompt) {
      const int slot = 0;
      (*model)->decode(*cache, &slot, &tokens[t], 1, got.data());
    }
    for (int v = 0; v < V; ++v) {
      ASSERT_NEAR(got[v], want[static_cast<size_t>(t) * V + v], 2e-4)
          << name_of(GetParam()) << " position " << t << " token " << v;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, SpecFeatures, ::testing::ValuesIn(kAllSpecFeatures),
                         [](const auto& info) {
                           std::string n = name_of(info.param);
                           for (char& ch : n) if (ch == ' ') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace cohort::models
