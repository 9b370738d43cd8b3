// KvBlockPool (see kv_blocks.h).
#include "models/decode/kv_blocks.h"

#include "base/check.h"

namespace cohort::models::decode {

KvBlockPool::KvBlockPool(int blocks, int block_size, int slots, int blocks_per_slot)
    : blocks_(blocks), block_size_(block_size), slots_(slots), per_slot_(blocks_per_slot),
      table_(static_cast<size_t>(slots + 1) * blocks_per_slot, blocks), held_(slots + 1, 0) {
  COHORT_CHECK(blocks >= 0 && slots >= 1 && blocks_per_slot >= 1);
  COHORT_CHECK_MSG(block_size > 0 && (block_size & (block_size - 1)) == 0, "block size {} is not a power of two",
                   block_size);
  free_.reserve(blocks);
  for (int b = blocks - 1; b >= 0; --b) free_.push_back(b);  // block 0 handed out first
}

int KvBlockPool::blocks_for(int64_t positions) const {
  return static_cast<int>((positions + block_size_ - 1) / block_size_);
}

bool KvBlockPool::grow(int slot, int positions) {
  COHORT_CHECK(slot >= 0 && slot < slots_);
  const size_t want = static_cast<size_t>(blocks_for(positions));
  size_t& have = held_[slot];
  if (want <= have) return true;
  if (want > static_cast<size_t>(per_slot_) || want - have > free_.size()) return false;
  int32_t* row = table_.data() + static_cast<size_t>(slot) * per_slot_;
  for (; have < want; ++have) {
    row[have] = free_.back();
    free_.pop_back();
  }
  changed_ = true;
  return true;
}

void KvBlockPool::release(int slot) {
  COHORT_CHECK(slot >= 0 && slot < slots_);
  int32_t* row = table_.data() + static_cast<size_t>(slot) * per_slot_;
  size_t& have = held_[slot];
  if (have == 0) return;
  while (have > 0) {
    free_.push_back(row[--have]);
    row[have] = spare();
  }
  changed_ = true;
}

bool KvBlockPool::take_changed() {
  const bool was = changed_;
  changed_ = false;
  return was;
}

}  // namespace cohort::models::decode
