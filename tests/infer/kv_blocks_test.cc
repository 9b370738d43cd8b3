// The paged KV cache's bookkeeping (models::decode::KvBlockPool) and the scheduler's
// admission by free blocks: a request waits until its whole length fits
// beside the running sequences' reservations, the queue's head is not
// overtaken, and what is generated does not depend on how many wait.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "models/decode/kv_blocks.h"
#include "infer/scheduler.h"
#include "tests/infer/tiny_engine.h"

namespace cohort::infer {
namespace {

TEST(KvBlockPool, SlotsGrowByBlocksAndGiveThemBack) {
  models::decode::KvBlockPool pool(6, 16, 3, 4);  // 6 blocks of 16, 3 slots of up to 64 positions
  EXPECT_EQ(pool.blocks_for(0), 0);
  EXPECT_EQ(pool.blocks_for(16), 1);
  EXPECT_EQ(pool.blocks_for(17), 2);
  ASSERT_TRUE(pool.grow(0, 17));
  ASSERT_TRUE(pool.grow(1, 48));
  EXPECT_EQ(pool.held(0), 2);
  EXPECT_EQ(pool.free(), 1);
  EXPECT_TRUE(pool.grow(0, 20));   // within its blocks: nothing taken
  EXPECT_EQ(pool.free(), 1);
  EXPECT_FALSE(pool.grow(2, 33));  // needs 3, 1 free: nothing changes
  EXPECT_EQ(pool.held(2), 0);
  EXPECT_EQ(pool.free(), 1);
  EXPECT_FALSE(pool.grow(2, 65));  // beyond a slot's row
  // Every held block is distinct and in range; entries not held, and the
  // spare slot's row, point at the spare.
  std::set<int32_t> seen;
  const auto& t = pool.table();
  ASSERT_EQ(t.size(), 4u * 4u);
  for (int s = 0; s < 4; ++s) {
    for (int i = 0; i < 4; ++i) {
      const int32_t b = t[s * 4 + i];
      if (s < 3 && i < pool.held(s)) {
        EXPECT_TRUE(b >= 0 && b < 6 && seen.insert(b).second) << "slot " << s << " entry " << i;
      } else {
        EXPECT_EQ(b, pool.spare()) << "slot " << s << " entry " << i;
      }
    }
  }
  // The first upload takes every row, the spare slot's (row 3) included;
  // later ones the rows of the slots that changed, and nothing else.
  auto rows = [&] {
    const models::decode::KvBlockPool::Rows r = pool.take_changed();
    return std::pair<int, int>(r.first, r.end);
  };
  EXPECT_EQ(rows(), std::pair(0, 4));
  EXPECT_TRUE(pool.take_changed().empty());
  pool.release(1);
  EXPECT_EQ(rows(), std::pair(1, 2));
  EXPECT_EQ(pool.free(), 4);
  EXPECT_TRUE(pool.grow(2, 64));
  EXPECT_EQ(pool.free(), 0);
  EXPECT_EQ(rows(), std::pair(2, 3));
  EXPECT_TRUE(pool.grow(2, 64));  // already held: no change
  EXPECT_TRUE(pool.take_changed().empty());
  pool.release(0);
  pool.release(2);
  EXPECT_EQ(rows(), std::pair(0, 3));
  pool.release(1);  // holds nothing: no change
  EXPECT_TRUE(pool.take_changed().empty());
}

// Prefix caching: full blocks keyed by their tokens and all before them.
std::vector<int32_t> tokens(int n, int seed) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (seed * 7919 + i * 31) % 1000;
  return t;
}

TEST(KvBlockPool, ABlockKeyedByItsPrefixIsReusedAfterItsSlotIsReleased) {
  models::decode::KvBlockPool pool(8, 16, 3, 4);
  const std::vector<int32_t> a = tokens(40, 1);  // two full blocks and 8 positions
  ASSERT_TRUE(pool.grow(0, 40));
  pool.commit(0, a.data(), 40);
  EXPECT_EQ(pool.cached(), 2);
  const int32_t first = pool.table()[0], second = pool.table()[1];
  pool.release(0);
  EXPECT_EQ(pool.free(), 8);  // cached blocks count as free: grow() may take them
  // The same 40 tokens: both blocks, the rest to compute.
  EXPECT_EQ(pool.match_prefix(1, a.data(), 40), 32);
  EXPECT_EQ(pool.held(1), 2);
  EXPECT_EQ(pool.table()[4], first);
  EXPECT_EQ(pool.table()[5], second);
  EXPECT_EQ(pool.free(), 6);
  pool.release(1);
  // At least one token is left to compute: 32 tokens reuse one block.
  EXPECT_EQ(pool.match_prefix(1, a.data(), 32), 16);
  pool.release(1);
  // A change in the second block keeps the first; in the first, nothing.
  std::vector<int32_t> b = a;
  b[20] += 1;
  EXPECT_EQ(pool.match_prefix(1, b.data(), 40), 16);
  pool.release(1);
  b[3] += 1;
  EXPECT_EQ(pool.match_prefix(1, b.data(), 40), 0);
  EXPECT_EQ(pool.held(1), 0);
}

TEST(KvBlockPool, ABlockTwoSlotsHoldIsFreedOnlyWhenBothLetGo) {
  models::decode::KvBlockPool pool(6, 16, 3, 4);
  const std::vector<int32_t> a = tokens(33, 2);
  ASSERT_TRUE(pool.grow(0, 33));
  pool.commit(0, a.data(), 33);
  EXPECT_EQ(pool.match_prefix(1, a.data(), 33), 32);  // while slot 0 still runs
  EXPECT_EQ(pool.free(), 3);  // slot 1 took no new block
  ASSERT_TRUE(pool.grow(1, 40));  // its own third block
  EXPECT_NE(pool.table()[4 + 2], pool.table()[2]);
  EXPECT_EQ(pool.free(), 2);
  pool.release(0);
  EXPECT_EQ(pool.free(), 3);  // only slot 0's own third block came back
  pool.release(1);
  EXPECT_EQ(pool.free(), 6);
  EXPECT_EQ(pool.match_prefix(2, a.data(), 33), 32);
}

TEST(KvBlockPool, CachedBlocksAreTakenLastAndLeastRecentlyReleasedFirst) {
  models::decode::KvBlockPool pool(4, 16, 3, 4);
  const std::vector<int32_t> a = tokens(17, 3), b = tokens(17, 4);
  ASSERT_TRUE(pool.grow(0, 17));
  pool.commit(0, a.data(), 17);
  ASSERT_TRUE(pool.grow(1, 17));
  pool.commit(1, b.data(), 17);
  pool.release(0);  // a's block released first
  pool.release(1);
  EXPECT_EQ(pool.cached(), 2);
  ASSERT_TRUE(pool.grow(2, 32));  // the two never-keyed blocks first
  EXPECT_EQ(pool.cached(), 2);
  ASSERT_TRUE(pool.grow(2, 48));  // then a's block, released longest ago
  EXPECT_EQ(pool.cached(), 1);
  pool.release(2);
  EXPECT_EQ(pool.match_prefix(0, a.data(), 17), 0);
  EXPECT_EQ(pool.match_prefix(1, b.data(), 17), 16);
  EXPECT_FALSE(pool.grow(2, 65));  // more than a slot's row
}

// The CPU engine with a paged engine's accounting: `blocks` blocks of 8
// positions for all its slots, and a check that no slot is ever asked for
// more than the pool has free (as the CUDA engine's
// models::decode::KvBlockPool would refuse).
class BlockAccountedEngine final : public models::decode::InferenceEngine {
 public:
  BlockAccountedEngine(std::unique_ptr<models::decode::ModelEngine> inner, int blocks)
      : inner_(std::move(inner)), pool_(blocks, 8, inner_->slots(), (inner_->capacity() + 7) / 8),
        length_(inner_->slots(), 0) {}
  int vocab_size() const override { return inner_->vocab_size(); }
  int slots() const override { return inner_->slots(); }
  int capacity() const override { return inner_->capacity(); }
  std::string describe() const override { return "block-accounted " + inner_->describe(); }
  int kv_block_size() const override { return 8; }
  int64_t kv_blocks() const override { return pool_.total(); }
  int64_t kv_free_blocks() const override { return pool_.free(); }
  void release(int slot) override { pool_.release(slot), length_[slot] = 0; }
  void prefill(int slot, const int32_t* tokens, int n, float* logits, int32_t* greedy) override {
    pool_.release(slot);
    hold(slot, n);
    inner_->prefill(slot, tokens, n, logits, greedy);
  }
  void decode(const int* slots, const int32_t* tokens, int B, float* logits, int32_t* greedy) override {
    for (int b = 0; b < B; ++b) hold(slots[b], length_[slots[b]] + 1);
    inner_->decode(slots, tokens, B, logits, greedy);
  }
  bool can_extend() const override { return true; }
  void extend(int slot, const int32_t* tokens, int n, float* logits, int32_t* greedy) override {
    hold(slot, length_[slot] + n);
    inner_->extend(slot, tokens, n, logits, greedy);
  }
  int most_held = 0;

 private:
  void hold(int slot, int positions) {
    ASSERT_TRUE(pool_.grow(slot, positions)) << "slot " << slot << " ran out of KV blocks at " << positions;
    length_[slot] = positions;
    most_held = std::max(most_held, pool_.total() - pool_.free());
  }
  std::unique_ptr<models::decode::ModelEngine> inner_;
  models::decode::KvBlockPool pool_;
  std::vector<int> length_;
};

using testing::request;

// A cache too small for every request's whole length: requests are
// admitted by the blocks their prompts need now, so more run at once than
// whole lengths would allow; when the running ones outgrow the cache the
// newest is preempted and later comes back where it stopped; and every
// request gets the tokens an ample cache gives.
TEST(KvAdmission, ASmallCacheAdmitsByPresentNeedPreemptsTheNewestAndGivesTheTokensOfAnAmpleCache) {
  std::map<int64_t, std::vector<int32_t>> tokens[2];
  int most_running[2] = {0, 0};
  int64_t preemptions[2] = {0, 0};
  for (int limited = 0; limited < 2; ++limited) {
    // 6 slots; limited: 7 blocks of 8 = 56 positions, while each request
    // grows to 3 blocks (10 + 12 = 22 positions).
    BlockAccountedEngine engine(testing::tiny_engine(6, 64), limited ? 7 : 48);
    SchedulerOptions o;
    o.max_batched_tokens = 12;  // six decode rows and six prompt tokens
    Scheduler s(engine, o);
    for (int id = 0; id < 6; ++id) ASSERT_TRUE(s.add(request(id, 10, 12)).is_ok());
    for (int guard = 0; !s.idle() && guard < 2000; ++guard) {
      for (const TokenEvent& e : s.step()) {
        ASSERT_FALSE(e.finished && e.token < 0) << "request " << e.id << " ended without a token";
        if (e.token >= 0) tokens[limited][e.id].push_back(e.token);
      }
      most_running[limited] = std::max(most_running[limited], s.running());
      EXPECT_LE(s.kv_held_blocks(), engine.kv_blocks());
    }
    ASSERT_TRUE(s.idle());
    EXPECT_EQ(s.kv_held_blocks(), 0);
    EXPECT_EQ(engine.kv_free_blocks(), engine.kv_blocks());
    preemptions[limited] = s.preemptions();
  }
  EXPECT_EQ(most_running[0], 6);
  EXPECT_EQ(preemptions[0], 0);
  EXPECT_GT(most_running[1], 2) << "whole lengths would have let two run";
  EXPECT_GT(preemptions[1], 0);
  EXPECT_EQ(tokens[1], tokens[0]);
  for (const auto& [id, t] : tokens[0]) EXPECT_EQ(t.size(), 12u) << id;
}

// A preempted sequence keeps its sampler: with temperature 1 and its own
// seed it draws the tokens it would have drawn unpreempted.
TEST(KvAdmission, APreemptedSampledSequenceDrawsTheTokensItWouldHaveDrawn) {
  std::map<int64_t, std::vector<int32_t>> tokens[2];
  int64_t preemptions = 0;
  for (int limited = 0; limited < 2; ++limited) {
    BlockAccountedEngine engine(testing::tiny_engine(4, 64), limited ? 6 : 48);
    SchedulerOptions o;
    o.max_batched_tokens = 8;
    Scheduler s(engine, o);
    for (int id = 0; id < 4; ++id) {
      SequenceRequest r = request(id, 9, 14);
      r.sampling.temperature = 1.0f;
      r.sampling.seed = 77;
      r.sampler_stream = static_cast<uint64_t>(id);
      ASSERT_TRUE(s.add(std::move(r)).is_ok());
    }
    for (int guard = 0; !s.idle() && guard < 2000; ++guard) {
      for (const TokenEvent& e : s.step()) {
        if (e.token >= 0) tokens[limited][e.id].push_back(e.token);
      }
    }
    ASSERT_TRUE(s.idle());
    if (limited) preemptions = s.preemptions();
  }
  EXPECT_GT(preemptions, 0);
  EXPECT_EQ(tokens[1], tokens[0]);
}

TEST(KvAdmission, TheQueuesHeadIsNotOvertakenByASmallerRequest) {
  BlockAccountedEngine engine(testing::tiny_engine(4, 64), 8);  // 64 positions in all
  Scheduler s(engine, {});
  ASSERT_TRUE(s.add(request(1, 40, 20)).is_ok());  // 5 blocks now, 8 at the end
  ASSERT_TRUE(s.add(request(2, 30, 20)).is_ok());  // 4 now: not beside request 1's 5 and its growth
  ASSERT_TRUE(s.add(request(3, 4, 4)).is_ok());    // 1 block would fit, but comes after 2
  s.step();
  EXPECT_EQ(s.running(), 1);
  EXPECT_EQ(s.waiting(), 2);
  std::vector<int64_t> first_token_order;
  for (int guard = 0; !s.idle() && guard < 1000; ++guard) {
    for (const TokenEvent& e : s.step()) {
      if (e.token >= 0 && std::find(first_token_order.begin(), first_token_order.end(), e.id) ==
                              first_token_order.end()) {
        first_token_order.push_back(e.id);
      }
    }
  }
  EXPECT_EQ(first_token_order, (std::vector<int64_t>{1, 2, 3}));
}

TEST(KvAdmission, ARequestLongerThanTheWholeCacheIsRefusedNamingBoth) {
  BlockAccountedEngine engine(testing::tiny_engine(2, 64), 4);  // 32 positions
  Scheduler s(engine, {});
  const Status st = s.add(request(1, 20, 20));
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("40 positions but the KV cache holds 32"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace cohort::infer
