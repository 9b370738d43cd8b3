// CPU decode attention: attention_cached (attention.h) for one row at a time,
// each over its own slot's cache block.
#include "models/ops/decode_attention.h"

#include <cstddef>
#include <vector>

#include "models/ops/attention.h"

namespace cohort::models::cpu {

void decode_attention(float* y, const float* q, const float* k_cache, const float* v_cache,
                      DecodeRows rows, int n, const DecodeShape& s) {
  const size_t slot_stride = static_cast<size_t>(s.hkv) * s.capacity * s.head_dim;
  const size_t ld = static_cast<size_t>(s.hq) * s.head_dim;
  std::vector<float> scratch(s.capacity);
  for (int r = 0; r < n; ++r) {
    const size_t slot = static_cast<size_t>(rows.slots[r]) * slot_stride;
    attention_cached(y + r * ld, scratch.data(), q + r * ld, k_cache + slot, v_cache + slot, 1,
                     rows.positions[r], s.capacity, s.hq, s.hkv, s.head_dim);
  }
}

}  // namespace cohort::models::cpu
