// KvBlockPool (see kv_blocks.h).
#include "models/decode/kv_blocks.h"

#include <algorithm>

#include "base/check.h"

namespace cohort::models::decode {

KvBlockPool::KvBlockPool(int blocks, int block_size, int slots, int blocks_per_slot)
    : blocks_(blocks), block_size_(block_size), slots_(slots), per_slot_(blocks_per_slot),
      table_(static_cast<size_t>(slots + 1) * blocks_per_slot, blocks), held_(slots + 1, 0),
      keyed_(slots + 1, 0), slot_key_(slots + 1, 0), slot_parent_(slots + 1, -1), refs_(blocks, 0),
      cache_(blocks), changed_{0, slots + 1} {
  COHORT_CHECK(blocks >= 0 && slots >= 1 && blocks_per_slot >= 1);
  COHORT_CHECK_MSG(block_size > 0 && (block_size & (block_size - 1)) == 0, "block size {} is not a power of two",
                   block_size);
  free_.reserve(blocks);
  for (int b = blocks - 1; b >= 0; --b) free_.push_back(b);  // block 0 handed out first
}

int KvBlockPool::blocks_for(int64_t positions) const {
  return static_cast<int>((positions + block_size_ - 1) / block_size_);
}

// FNV-1a over the block's token ids, seeded with the key of the prefix
// before it, then a final mix so that nearby prefixes spread over the map.
uint64_t KvBlockPool::block_key(uint64_t parent_key, const int32_t* tokens) const {
  uint64_t h = 0xcbf29ce484222325ull ^ parent_key;
  for (int i = 0; i < block_size_; ++i) {
    h ^= static_cast<uint32_t>(tokens[i]);
    h *= 0x100000001b3ull;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

int32_t KvBlockPool::take_free_block() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    b = cached_free_.front();  // the cached block released longest ago
    cached_free_.pop_front();
    by_key_.erase(cache_[b].key);
    cache_[b] = Cached{};
  }
  refs_[b] = 1;
  return b;
}

bool KvBlockPool::grow(int slot, int positions) {
  COHORT_CHECK(slot >= 0 && slot < slots_);
  const size_t want = static_cast<size_t>(blocks_for(positions));
  size_t& have = held_[slot];
  if (want <= have) return true;
  if (want > static_cast<size_t>(per_slot_) || want - have > static_cast<size_t>(free())) return false;
  int32_t* row = table_.data() + static_cast<size_t>(slot) * per_slot_;
  for (; have < want; ++have) row[have] = take_free_block();
  changed(slot);
  return true;
}

void KvBlockPool::release(int slot) {
  COHORT_CHECK(slot >= 0 && slot < slots_);
  int32_t* row = table_.data() + static_cast<size_t>(slot) * per_slot_;
  size_t& have = held_[slot];
  keyed_[slot] = 0, slot_key_[slot] = 0, slot_parent_[slot] = -1;
  if (have == 0) return;
  while (have > 0) {
    const int32_t b = row[--have];
    row[have] = spare();
    if (--refs_[b] > 0) continue;  // another slot still reads it
    if (cache_[b].tokens.empty()) {
      free_.push_back(b);
    } else {
      cache_[b].lru = cached_free_.insert(cached_free_.end(), b);
    }
  }
  changed(slot);
}

int KvBlockPool::match_prefix(int slot, const int32_t* tokens, int n) {
  COHORT_CHECK(slot >= 0 && slot < slots_ && held_[slot] == 0 && n >= 1);
  int32_t* row = table_.data() + static_cast<size_t>(slot) * per_slot_;
  const int most = std::min((n - 1) / block_size_, per_slot_);
  uint64_t key = 0;
  int32_t parent = -1;
  int count = 0;
  for (; count < most; ++count) {
    const int32_t* block_tokens = tokens + static_cast<size_t>(count) * block_size_;
    const uint64_t k = block_key(key, block_tokens);
    const auto it = by_key_.find(k);
    if (it == by_key_.end()) break;
    const int32_t b = it->second;
    Cached& c = cache_[b];
    if (c.parent != parent || !std::equal(c.tokens.begin(), c.tokens.end(), block_tokens)) break;
    if (refs_[b]++ == 0) cached_free_.erase(c.lru);
    row[count] = b;
    key = k, parent = b;
  }
  held_[slot] = count, keyed_[slot] = count, slot_key_[slot] = key, slot_parent_[slot] = parent;
  if (count > 0) changed(slot);
  return count * block_size_;
}

void KvBlockPool::commit(int slot, const int32_t* tokens, int positions) {
  COHORT_CHECK(slot >= 0 && slot < slots_);
  const size_t full = std::min(static_cast<size_t>(positions / block_size_), held_[slot]);
  const int32_t* row = table_.data() + static_cast<size_t>(slot) * per_slot_;
  for (size_t i = keyed_[slot]; i < full; ++i) {
    const int32_t* block_tokens = tokens + i * block_size_;
    const uint64_t key = block_key(slot_key_[slot], block_tokens);
    const int32_t b = row[i];
    const auto [it, added] = by_key_.try_emplace(key, b);
    if (added) {
      Cached& c = cache_[b];
      c.key = key;
      c.parent = slot_parent_[slot];
      c.tokens.assign(block_tokens, block_tokens + block_size_);
    }
    slot_key_[slot] = key, slot_parent_[slot] = it->second;
  }
  keyed_[slot] = std::max(keyed_[slot], full);
}

KvBlockPool::Rows KvBlockPool::take_changed() {
  const Rows rows = changed_;
  changed_ = Rows{};
  return rows;
}

}  // namespace cohort::models::decode
