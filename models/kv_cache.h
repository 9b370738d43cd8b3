// A preallocated KV cache for incremental decoding.
//
// Layout per layer: keys and values [slots, kv_heads_local, capacity,
// head_dim] in the model's backend memory, so one sequence's block for one KV
// head is contiguous over positions. A slot is one sequence; length(slot) is
// how many positions it holds. Model::prefill / Model::decode append to slots;
// reset(slot) reuses one for a new sequence without touching memory.
// Not thread-safe; owned by the caller, must not outlive the backend.
#pragma once

#include <vector>

#include "base/status.h"
#include "models/backend.h"

namespace cohort::models {

class Model;

class KvCache {
 public:
  // Errors when capacity exceeds the model's max_seq (RoPE table).
  static Result<KvCache> create(const Model& model, int slots, int capacity);
  KvCache(KvCache&&) noexcept;
  KvCache& operator=(KvCache&&) = delete;
  KvCache(const KvCache&) = delete;
  ~KvCache();

  int slots() const { return slots_; }
  int capacity() const { return capacity_; }
  int length(int slot) const { return lengths_.at(slot); }
  void reset(int slot) { lengths_.at(slot) = 0; }

  // One slot's [kv_heads, capacity, D] block of layer `layer`.
  float* keys(int layer, int slot) const;
  float* values(int layer, int slot) const;
  size_t bytes() const;

 private:
  friend class Model;
  KvCache() = default;
  Backend* backend_ = nullptr;
  int slots_ = 0, capacity_ = 0, layers_ = 0;
  size_t slot_stride_ = 0;  // floats per slot per layer
  std::vector<float*> k_, v_;
  std::vector<int> lengths_;
};

}  // namespace cohort::models
