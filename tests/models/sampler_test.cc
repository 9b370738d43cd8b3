// TokenSampler draws from the distribution it defines (greedy, temperature,
// top_k, top_p) without sorting the vocabulary, reproducibly per
// (seed, stream), at a 152k-token vocabulary too.
#include <cmath>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "models/token_sampler.h"

namespace cohort::models {
namespace {

const std::vector<float> kLogits = {1.0f, 3.0f, 2.5f, -1.0f, 3.0f, 0.0f};

std::map<int, double> frequencies(const SamplingParams& p, int draws) {
  TokenSampler sampler(p, 0);
  std::map<int, double> f;
  for (int i = 0; i < draws; ++i) f[sampler.sample(kLogits.data(), 6)] += 1.0 / draws;
  return f;
}

// softmax(logits / t) over `ids`, renormalised.
std::map<int, double> expected(const std::vector<int>& ids, float t) {
  std::map<int, double> e;
  double total = 0;
  for (int i : ids) total += e[i] = std::exp(kLogits[i] / t);
  for (auto& [i, v] : e) v /= total;
  return e;
}

void expect_close(const std::map<int, double>& got, const std::map<int, double>& want) {
  for (const auto& [i, v] : got) EXPECT_TRUE(want.count(i)) << "token " << i << " drawn";
  for (const auto& [i, v] : want) {
    EXPECT_NEAR(got.count(i) ? got.at(i) : 0.0, v, 0.015) << "token " << i;
  }
}

// OpenAI's presence and frequency penalties over the generated tokens,
// the repetition penalty over prompt and output (divide a positive logit,
// multiply a negative one), and min_tokens masking the stop ids.
TEST(TokenSampler, PenaltiesAreAppliedAsOpenAiAndTransformersDefineThem) {
  std::vector<float> l = kLogits;  // {1, 3, 2.5, -1, 3, 0}
  SamplingParams p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  apply_penalties(l.data(), 6, p, /*prompt=*/{3}, /*generated=*/{1, 1, 2}, /*stop_ids=*/{4});
  EXPECT_FLOAT_EQ(l[1], 3.0f - 0.5f - 2 * 0.25f);
  EXPECT_FLOAT_EQ(l[2], 2.5f - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(l[3], -1.0f);  // in the prompt only: OpenAI's penalties skip it
  EXPECT_FLOAT_EQ(l[4], 3.0f);   // min_tokens 0: stops stay
  l = kLogits;
  SamplingParams r;
  r.repetition_penalty = 2.0f;
  r.min_tokens = 4;
  apply_penalties(l.data(), 6, r, {3}, {1, 9, -2}, {4, 5});
  EXPECT_FLOAT_EQ(l[1], 1.5f);
  EXPECT_FLOAT_EQ(l[3], -2.0f);
  EXPECT_FLOAT_EQ(l[0], 1.0f);
  EXPECT_TRUE(std::isinf(l[4]) && l[4] < 0);
  EXPECT_TRUE(std::isinf(l[5]) && l[5] < 0);
  EXPECT_EQ(TokenSampler(SamplingParams{}, 0).sample(l.data(), 6), 2);  // 3.0 at 4 is masked, 1 is penalised
}

TEST(TokenSampler, GreedyPicksTheLowestIdAmongTheLargest) {
  TokenSampler s({0.0f, 0, 1.0f, 7}, 0);
  EXPECT_EQ(s.sample(kLogits.data(), 6), 1);
}

TEST(TokenSampler, TemperatureTopKAndTopPFollowTheirDistributions) {
  expect_close(frequencies({1.0f, 0, 1.0f, 1}, 40000), expected({0, 1, 2, 3, 4, 5}, 1.0f));
  expect_close(frequencies({0.5f, 0, 1.0f, 2}, 40000), expected({0, 1, 2, 3, 4, 5}, 0.5f));
  // Top 2 of the tie at 3.0: ids 1 and 4.
  expect_close(frequencies({1.0f, 2, 1.0f, 3}, 20000), expected({1, 4}, 1.0f));
  // 1 and 4 hold about 0.66 of the mass; with 2.5 added, 0.91.
  expect_close(frequencies({1.0f, 0, 0.8f, 4}, 40000), expected({1, 2, 4}, 1.0f));
  expect_close(frequencies({1.0f, 0, 0.01f, 5}, 1000), {{1, 1.0}});
}

TEST(TokenSampler, SameSeedAndStreamGiveTheSameDraws) {
  std::vector<float> logits(151936);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& l : logits) l = normal(rng);
  TokenSampler a({0.8f, 0, 0.9f, 42}, 5), b({0.8f, 0, 0.9f, 42}, 5), c({0.8f, 0, 0.9f, 42}, 6);
  int differ = 0;
  for (int i = 0; i < 20; ++i) {
    const int32_t x = a.sample(logits.data(), 151936);
    EXPECT_EQ(x, b.sample(logits.data(), 151936));
    differ += x != c.sample(logits.data(), 151936);
    EXPECT_GE(x, 0);
    EXPECT_LT(x, 151936);
  }
  EXPECT_GT(differ, 0);
}

}  // namespace
}  // namespace cohort::models
