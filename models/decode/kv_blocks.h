// KvBlockPool: which blocks of a paged KV cache (models/ops/decode_rows.h)
// each slot holds, kept on the host and mirrored to the device as the block
// table.
//
// A slot grows block by block as its sequence gets longer and gives all of
// them back when the scheduler releases it; the blocks of a sequence need
// not be adjacent. Entries a slot does not hold point at the spare block
// (the last one), which padding rows of a captured decode step may write to
// and no sequence reads. The scheduler admits a request only while the
// blocks reserved for running sequences leave room for the request's whole
// length (scheduler.h), so growing within a reservation never fails.
//
// Thread-compatible; owned by one engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cohort::models::decode {

class KvBlockPool {
 public:
  // `blocks` usable blocks of `block_size` positions (a power of two), plus
  // the spare; `slots` rows of `blocks_per_slot` entries in the table (one
  // more row, for the engine's spare slot, always points at the spare).
  KvBlockPool(int blocks, int block_size, int slots, int blocks_per_slot);

  int block_size() const { return block_size_; }
  int total() const { return blocks_; }
  int free() const { return static_cast<int>(free_.size()); }
  int spare() const { return blocks_; }  // block id of the spare
  // Blocks a sequence of `positions` needs.
  int blocks_for(int64_t positions) const;

  // Makes `slot` hold the blocks for positions [0, positions); false, with
  // nothing changed, when that needs more than are free or than a slot's row.
  bool grow(int slot, int positions);
  // Gives every block of `slot` back.
  void release(int slot);
  int held(int slot) const { return static_cast<int>(held_.at(slot)); }

  // [slots + 1, blocks_per_slot] block ids.
  const std::vector<int32_t>& table() const { return table_; }
  // Whether the table changed since the last call (the device copy is stale).
  bool take_changed();

 private:
  int blocks_, block_size_, slots_, per_slot_;
  std::vector<int32_t> free_;    // a stack: the most recently freed first
  std::vector<int32_t> table_;
  std::vector<size_t> held_;     // blocks per slot, a prefix of its row
  bool changed_ = true;
};

}  // namespace cohort::models::decode
