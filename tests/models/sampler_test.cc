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
