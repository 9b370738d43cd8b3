// Incremental inference and sampling: KV-cache logits equal the full forward
// pass, batched prefill equals separate ones, and the sampler follows its
// definitions. The generation loop itself is tested in tests/infer.
#include <gtest/gtest.h>

#include <cmath>

#include "models/kv_cache.h"
#include "models/model.h"
#include "models/token_sampler.h"

namespace cohort::models {
namespace {

std::unique_ptr<Model> tiny_model(Backend* backend) {
  ModelConfig c = *preset_config("tiny");
  auto m = std::move(Model::create(c, {}, backend).value());
  m->init_weights(21, 0.1f);
  return m;
}

TEST(KvCache, PrefillAndDecodeMatchTheFullForwardPass) {
  auto cpu = make_cpu_backend();
  auto model = tiny_model(cpu.get());
  const int T = 12, V = 256;
  std::vector<int32_t> tokens(T);
  for (int i = 0; i < T; ++i) tokens[i] = (i * 29 + 3) % V;
  model->forward(tokens.data(), nullptr, 1, T);
  std::vector<float> full(model->logits(), model->logits() + T * V);
  auto cache = std::move(KvCache::create(*model, 2, 32).value());
  std::vector<float> logits(V);
  model->prefill(cache, 1, tokens.data(), 7, logits.data());  // slot 1, chunked prefill
  for (int i = 0; i < V; ++i) ASSERT_NEAR(logits[i], full[6 * V + i], 1e-4);
  model->prefill(cache, 1, tokens.data() + 7, 2, logits.data());
  for (int i = 0; i < V; ++i) ASSERT_NEAR(logits[i], full[8 * V + i], 1e-4);
  for (int t = 9; t < T; ++t) {
    const int slot = 1;
    model->decode(cache, &slot, &tokens[t], 1, logits.data());
    for (int i = 0; i < V; ++i) ASSERT_NEAR(logits[i], full[t * V + i], 1e-4) << t;
  }
  EXPECT_EQ(cache.length(1), T);
  EXPECT_EQ(cache.length(0), 0);
  EXPECT_FALSE(KvCache::create(*model, 1, 100000).is_ok());
}

TEST(KvCache, BatchedPrefillEqualsSeparatePrefills) {
  auto cpu = make_cpu_backend();
  auto model = tiny_model(cpu.get());
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3, 4, 5}, {9}, {200, 100, 50}};
  auto cache = std::move(KvCache::create(*model, 3, 16).value());
  std::vector<float> batched(3 * 256), single(256);
  model->prefill_batch(cache, {2, 0, 1}, prompts, batched.data());
  EXPECT_EQ(cache.length(2), 5);
  EXPECT_EQ(cache.length(0), 1);
  auto alone = std::move(KvCache::create(*model, 1, 16).value());
  for (int i = 0; i < 3; ++i) {
    alone.reset(0);
    model->prefill(alone, 0, prompts[i].data(), static_cast<int>(prompts[i].size()), single.data());
    for (int j = 0; j < 256; ++j) ASSERT_NEAR(batched[i * 256 + j], single[j], 1e-5) << i;
  }
}

TEST(Sampler, FollowsGreedyTopKAndTopPDefinitions) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  TokenSampler greedy(SamplingParams{0.0f, 0, 1.0f, 1}, 0);
  EXPECT_EQ(greedy.sample(logits.data(), 3), 0);
  const int n = 20000;
  auto frequencies = [&](SamplingParams p) {
    TokenSampler s(p, 0);
    std::vector<double> f(3, 0);
    for (int i = 0; i < n; ++i) f[s.sample(logits.data(), 3)] += 1.0 / n;
    return f;
  };
  auto plain = frequencies({1.0f, 0, 1.0f, 7});
  EXPECT_NEAR(plain[0], 0.5, 0.02);
  EXPECT_NEAR(plain[1], 0.3, 0.02);
  EXPECT_NEAR(plain[2], 0.2, 0.02);
  auto top2 = frequencies({1.0f, 2, 1.0f, 7});
  EXPECT_EQ(top2[2], 0.0);
  EXPECT_NEAR(top2[0], 0.625, 0.02);
  auto nucleus = frequencies({1.0f, 0, 0.6f, 7});  // 0.5 < 0.6 <= 0.8: keeps two
  EXPECT_EQ(nucleus[2], 0.0);
  EXPECT_NEAR(nucleus[1], 0.375, 0.02);
  auto cold = frequencies({0.05f, 0, 1.0f, 7});
  EXPECT_GT(cold[0], 0.99);
  TokenSampler a({1.0f, 0, 1.0f, 3}, 4), b({1.0f, 0, 1.0f, 3}, 4);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.sample(logits.data(), 3), b.sample(logits.data(), 3));
}

}  // namespace
}  // namespace cohort::models
