// PagedFake: an engine with a paged KV cache (models::decode's KvBlockPool,
// blocks of 8 positions) and no model, for scheduler tests: each greedy
// token is a function of the slot's tokens so far, so runs that feed a
// sequence the same tokens agree whatever they batch it with. It records
// each forward's chunks as (first position, tokens).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "models/decode/engine.h"
#include "models/decode/kv_blocks.h"

namespace cohort::testing {

class PagedFake final : public models::decode::InferenceEngine {
 public:
  using Pick = std::function<int32_t(const std::vector<int32_t>& tokens)>;
  struct Shape {
    int slots = 4;
    int blocks = 64;            // in the whole cache
    int blocks_per_slot = 16;   // a slot's capacity, in blocks
    int vocab = 100;
    bool prefix_caching = false;
    bool run_ahead = false;     // can_run_ahead(): the scheduler's run-ahead path
  };
  PagedFake(Shape shape, Pick pick)
      : shape_(shape), pick_(std::move(pick)), pool_(shape.blocks, 8, shape.slots, shape.blocks_per_slot),
        tokens_(shape.slots) {}
  int vocab_size() const override { return shape_.vocab; }
  int slots() const override { return shape_.slots; }
  int capacity() const override { return 8 * shape_.blocks_per_slot; }
  std::string describe() const override { return "paged fake"; }
  int kv_block_size() const override { return 8; }
  int64_t kv_blocks() const override { return pool_.total(); }
  int64_t kv_free_blocks() const override { return pool_.free(); }
  bool can_extend() const override { return true; }
  bool caches_prefixes() const override { return shape_.prefix_caching; }
  bool can_run_ahead() const override { return shape_.run_ahead; }
  void release(int slot) override {
    pool_.release(slot);
    tokens_[slot].clear();
  }
  int reuse_prefix(int slot, const int32_t* tokens, int n) override {
    if (!shape_.prefix_caching) return 0;
    release(slot);
    const int cached = pool_.match_prefix(slot, tokens, n);
    tokens_[slot].assign(tokens, tokens + cached);
    return cached;
  }
  void prefill(int slot, const int32_t* tokens, int n, float* logits, int32_t* greedy) override {
    release(slot);
    extend(slot, tokens, n, logits, greedy);
  }
  void extend(int slot, const int32_t* tokens, int n, float* logits, int32_t* greedy) override {
    std::vector<int32_t>& t = tokens_[slot];
    t.insert(t.end(), tokens, tokens + n);
    EXPECT_TRUE(pool_.grow(slot, static_cast<int>(t.size()))) << "slot " << slot << " at " << t.size();
    if (shape_.prefix_caching) pool_.commit(slot, t.data(), static_cast<int>(t.size()));
    EXPECT_EQ(logits, nullptr);
    *greedy = pick_(t);
  }
  void decode(const int* slots, const int32_t* tokens, int B, float* logits, int32_t* greedy) override {
    for (int b = 0; b < B; ++b) extend(slots[b], tokens + b, 1, logits, greedy + b);
  }
  void step(const int* decode_slots, const int32_t* decode_tokens, int d, const std::vector<Chunk>& chunks,
            float* logits, int32_t* greedy) override {
    std::vector<std::pair<int, int>> forward;
    for (const Chunk& c : chunks) {
      forward.emplace_back(c.fresh ? 0 : static_cast<int>(tokens_[c.slot].size()), c.n);
    }
    forwards.push_back(forward);
    InferenceEngine::step(decode_slots, decode_tokens, d, chunks, logits, greedy);
  }
  std::vector<std::vector<std::pair<int, int>>> forwards;

 private:
  Shape shape_;
  Pick pick_;
  models::decode::KvBlockPool pool_;
  std::vector<std::vector<int32_t>> tokens_;
};

}  // namespace cohort::testing
