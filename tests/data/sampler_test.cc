// The sampler: a global batch that does not depend on the world size,
// epochs that cover every window, exact resume, mixtures by weight, masked
// targets, vocabulary checks, and the prefetcher.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "data/batch_prefetcher.h"
#include "data/batch_sampler.h"

namespace cohort::data {
namespace {

// An in-memory source: tokens 0..n-1 (plus `offset`), optionally with a mask.
class VectorSource final : public TokenSource {
 public:
  explicit VectorSource(std::vector<int32_t> t, std::vector<uint8_t> m = {}) : t_(std::move(t)), m_(std::move(m)) {}
  int64_t size() const override { return int64_t(t_.size()); }
  bool has_loss_mask() const override { return !m_.empty(); }
  void read(int64_t b, int64_t n, int32_t* tokens, uint8_t* mask) const override {
    for (int64_t i = 0; i < n; ++i) {
      tokens[i] = t_[size_t(b + i)];
      if (mask) mask[i] = m_.empty() ? 1 : m_[size_t(b + i)];
    }
  }
  std::string describe() const override { return "vector"; }

 private:
  std::vector<int32_t> t_;
  std::vector<uint8_t> m_;
};

std::shared_ptr<const TokenSource> stream(int n, int offset = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = offset + i;
  return std::make_shared<VectorSource>(t);
}

TEST(Sampler, GlobalBatchDoesNotDependOnWorldSize) {
  const SamplerOptions opt{8, 16, 42, true, 0};
  auto reference = *BatchSampler::create({{stream(2000)}}, opt);
  std::vector<int32_t> in(8 * 16), tgt(8 * 16);
  ASSERT_TRUE(reference.fill(3, 0, 8, in.data(), tgt.data()).is_ok());
  for (int world : {1, 2, 4, 8}) {
    auto s = *BatchSampler::create({{stream(2000)}}, opt);
    std::vector<int32_t> all;
    for (int r = 0; r < world; ++r) {
      std::vector<int32_t> a(size_t(8 / world * 16)), b(a.size());
      ASSERT_TRUE(s.fill_rank(3, r, world, a.data(), b.data()).is_ok());
      all.insert(all.end(), a.begin(), a.end());
    }
    EXPECT_EQ(all, in) << "world " << world;
  }
  auto s = *BatchSampler::create({{stream(2000)}}, opt);
  EXPECT_FALSE(s.fill_rank(0, 0, 3, in.data(), tgt.data()).is_ok());
}

TEST(Sampler, TargetsAreNextTokensAndEpochsCoverEveryWindow) {
  const SamplerOptions opt{4, 10, 7, true, 0};
  auto s = *BatchSampler::create({{stream(401)}}, opt);  // 40 windows
  ASSERT_EQ(s.windows(), 40);
  std::multiset<int32_t> starts;
  std::vector<int32_t> in(40), tgt(40);
  for (int step = 0; step < 10; ++step) {
    ASSERT_TRUE(s.fill(step, 0, 4, in.data(), tgt.data()).is_ok());
    for (int r = 0; r < 4; ++r) {
      starts.insert(in[size_t(r * 10)]);
      for (int i = 0; i < 10; ++i) EXPECT_EQ(tgt[size_t(r * 10 + i)], in[size_t(r * 10 + i)] + 1);
    }
  }
  EXPECT_EQ(starts.size(), 40u);
  EXPECT_EQ(std::set<int32_t>(starts.begin(), starts.end()).size(), 40u);  // each window once per epoch
}

TEST(Sampler, PermutationIsABijectionForAnySize) {
  for (int64_t n : {1, 2, 3, 17, 64, 1000, 4097}) {
    std::set<int64_t> seen;
    for (int64_t i = 0; i < n; ++i) seen.insert(permute_index(i, n, 99));
    EXPECT_EQ(int64_t(seen.size()), n);
    EXPECT_EQ(*seen.rbegin(), n - 1);
  }
}

TEST(Sampler, StateSavesAndRestoresExactly) {
  const SamplerOptions opt{2, 8, 5, true, 0};
  auto a = *BatchSampler::create({{stream(500)}}, opt);
  for (int i = 0; i < 7; ++i) a.next_step();
  auto state = *SamplerState::from_json(a.state().to_json());
  auto b = *BatchSampler::create({{stream(500)}}, opt);
  ASSERT_TRUE(b.restore(state).is_ok());
  EXPECT_EQ(b.step(), 7);
  std::vector<int32_t> x(16), y(16), x2(16), y2(16);
  ASSERT_TRUE(a.fill(a.next_step(), 0, 2, x.data(), y.data()).is_ok());
  ASSERT_TRUE(b.fill(b.next_step(), 0, 2, x2.data(), y2.data()).is_ok());
  EXPECT_EQ(x, x2);
  auto other = *BatchSampler::create({{stream(500)}}, SamplerOptions{2, 8, 6, true, 0});
  EXPECT_FALSE(other.restore(state).is_ok());
}

TEST(Sampler, MixturesFollowTheirWeights) {
  const SamplerOptions opt{64, 4, 3, true, 0};
  auto s = *BatchSampler::create({{stream(4001, 0), 1.0}, {stream(4001, 100000), 3.0}}, opt);
  std::vector<int32_t> in(64 * 4), tgt(in.size());
  int from_second = 0, total = 0;
  for (int step = 0; step < 64; ++step) {
    ASSERT_TRUE(s.fill(step, 0, 64, in.data(), tgt.data()).is_ok());
    for (int r = 0; r < 64; ++r, ++total) from_second += in[size_t(r * 4)] >= 100000;
  }
  EXPECT_NEAR(double(from_second) / total, 0.75, 0.01);
  EXPECT_FALSE(BatchSampler::create({{stream(100), 0.0}}, opt).is_ok());
}

TEST(Sampler, MaskedTargetsAreIgnoredAndNotCounted) {
  std::vector<int32_t> t(41);
  std::vector<uint8_t> m(41);
  for (int i = 0; i < 41; ++i) t[size_t(i)] = i, m[size_t(i)] = i % 2;
  auto s = *BatchSampler::create({{std::make_shared<VectorSource>(t, m)}}, SamplerOptions{4, 10, 1, false, 0});
  std::vector<int32_t> in(40), tgt(40);
  ASSERT_TRUE(s.fill(0, 0, 4, in.data(), tgt.data()).is_ok());
  for (int i = 0; i < 40; ++i) EXPECT_EQ(tgt[size_t(i)], (in[size_t(i)] + 1) % 2 ? in[size_t(i)] + 1 : kIgnoreTarget);
  EXPECT_EQ(s.counted_targets(0), 20);
}

TEST(Sampler, TokensOutsideTheVocabularyAreErrorsWithTheirPosition) {
  auto s = *BatchSampler::create({{stream(100)}}, SamplerOptions{1, 10, 1, false, 50});
  std::vector<int32_t> in(10), tgt(10);
  EXPECT_TRUE(s.fill(0, 0, 1, in.data(), tgt.data()).is_ok());
  const Status bad = s.fill(4, 0, 1, in.data(), tgt.data());
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.message().find("token 50 at position 50 is outside the model's vocabulary of 50"), std::string::npos)
      << bad.message();
}

TEST(Prefetcher, HandsOutTheSameBatchesAsDirectFills) {
  const SamplerOptions opt{8, 16, 11, true, 0};
  auto direct = *BatchSampler::create({{stream(3000)}}, opt);
  auto background = *BatchSampler::create({{stream(3000)}}, opt);
  BatchPrefetcher prefetcher(&background, 4, 4);
  std::vector<int32_t> in(64), tgt(64);
  for (int64_t step : {0, 1, 2, 5, 6}) {  // a jump (resume) included
    const RankBatch& b = prefetcher.take(step);
    ASSERT_TRUE(b.status.is_ok());
    ASSERT_TRUE(direct.fill(step, 4, 4, in.data(), tgt.data()).is_ok());
    EXPECT_EQ(b.inputs, in);
    EXPECT_EQ(b.targets, tgt);
    EXPECT_EQ(b.counted_targets, 8 * 16);
  }
}

}  // namespace
}  // namespace cohort::data
