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
// Prefix caching: a block whose positions are all written can be keyed by
// its tokens and every token before it (commit()); a later sequence with
// the same prefix takes those blocks instead of computing them again
// (match_prefix()), and a block held by several slots is only ever read.
// A keyed block no slot holds stays cached, with its contents, until
// grow() needs it: free blocks that were never keyed go first, then the
// cached ones, least recently released first. Matches compare the tokens
// themselves and the block before, not only the 64-bit key.
//
// Thread-compatible; owned by one engine.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <list>
#include <unordered_map>
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
  // Blocks no slot holds (cached ones included: grow() may take them).
  int free() const { return static_cast<int>(free_.size() + cached_free_.size()); }
  // Keyed blocks, held or not.
  int cached() const { return static_cast<int>(by_key_.size()); }
  int spare() const { return blocks_; }  // block id of the spare
  // Blocks a sequence of `positions` needs.
  int blocks_for(int64_t positions) const;

  // Makes `slot` hold the blocks for positions [0, positions); false, with
  // nothing changed, when that needs more than are free or than a slot's row.
  bool grow(int slot, int positions);
  // Gives every block of `slot` back (a keyed one stays cached).
  void release(int slot);
  int held(int slot) const { return static_cast<int>(held_.at(slot)); }

  // `slot`, holding nothing, takes the cached blocks of the longest prefix of
  // tokens[0, n) in whole blocks, leaving at least one token to compute (its
  // logits are the next token's); returns the positions they hold.
  int match_prefix(int slot, const int32_t* tokens, int n);
  // Keys `slot`'s blocks whose positions [0, positions) are all written,
  // `tokens` being the slot's tokens at those positions. A block whose
  // prefix another block already caches stays unkeyed.
  void commit(int slot, const int32_t* tokens, int positions);

  // [slots + 1, blocks_per_slot] block ids.
  const std::vector<int32_t>& table() const { return table_; }
  int blocks_per_slot() const { return per_slot_; }
  // The rows [first, end) that hold every change since the last call (the
  // device copy of them is stale; empty: none), so that a step uploads the
  // few slots that grew or ended rather than the whole table. The first
  // call covers every row, the spare slot's included.
  struct Rows {
    int first = 0, end = 0;
    bool empty() const { return first >= end; }
  };
  Rows take_changed();

 private:
  int blocks_, block_size_, slots_, per_slot_;
  int32_t take_free_block();
  struct Cached {
    uint64_t key = 0;
    int32_t parent = -1;            // the block before it in its sequence (-1: the first)
    std::vector<int32_t> tokens;    // block_size of them
    std::list<int32_t>::iterator lru;  // in cached_free_ while no slot holds it
  };
  uint64_t block_key(uint64_t parent_key, const int32_t* tokens) const;

  std::vector<int32_t> free_;    // unkeyed: a stack, the most recently freed first
  std::list<int32_t> cached_free_;  // keyed and held by no slot, least recently released first
  std::vector<int32_t> table_;
  std::vector<size_t> held_;     // blocks per slot, a prefix of its row
  std::vector<size_t> keyed_;    // per slot: how many of its first blocks commit() has seen
  std::vector<uint64_t> slot_key_;     // per slot: the key of its prefix up to keyed_ blocks
  std::vector<int32_t> slot_parent_;   // per slot: the block that caches that prefix
  std::vector<int32_t> refs_;    // slots holding each block
  std::vector<Cached> cache_;    // per block; key 0 with an empty token list: not keyed
  std::unordered_map<uint64_t, int32_t> by_key_;
  Rows changed_;  // set whole by the constructor
  void changed(int slot) {
    if (changed_.empty()) changed_ = Rows{slot, slot + 1};
    changed_.first = std::min(changed_.first, slot), changed_.end = std::max(changed_.end, slot + 1);
  }
};

}  // namespace cohort::models::decode
