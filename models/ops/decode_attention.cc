// CPU decode attention: attention_cached (attention.h) for one row at a time,
// each over its own slot's positions (contiguous or paged).
#include "models/ops/decode_attention.h"

#include <cstddef>
#include <string>
#include <vector>

#include "models/ops/attention.h"

namespace cohort::models::cpu {

void decode_attention(float* y, const float* q, const float* k_cache, const float* v_cache,
                      DecodeRows rows, int n, const DecodeShape& s) {
  const size_t D = static_cast<size_t>(s.head_dim);
  const size_t ld = static_cast<size_t>(s.hq) * D;
  std::vector<float> scratch(s.capacity);
  // The row's slot as one contiguous block [hkv, capacity, D]: gathered
  // through the block table when the cache is paged.
  std::vector<float> k_slot(static_cast<size_t>(s.hkv) * s.capacity * D);
  std::vector<float> v_slot(k_slot.size());
  for (int r = 0; r < n; ++r) {
    const int slot = rows.slots[r], pos = rows.positions[r];
    for (int h = 0; h < s.hkv; ++h) {
      for (int p = 0; p <= pos; ++p) {
        const size_t from = cache_offset(rows, s, slot, h, p);
        const size_t to = (static_cast<size_t>(h) * s.capacity + p) * D;
        std::copy(k_cache + from, k_cache + from + D, k_slot.data() + to);
        std::copy(v_cache + from, v_cache + from + D, v_slot.data() + to);
      }
    }
    attention_cached(y + r * ld, scratch.data(), q + r * ld, k_slot.data(), v_slot.data(), 1, pos,
                     s.capacity, s.hq, s.hkv, s.head_dim);
  }
}

}  // namespace cohort::models::cpu

namespace cohort::models::cuda {

Result<DecodeAttentionForm> parse_decode_attention_form(std::string_view name) {
  if (name == "lanes") return DecodeAttentionForm::kLanes;
  if (name == "tiles") return DecodeAttentionForm::kTiles;
  return invalid_argument("decode attention form '" + std::string(name) +
                          "': expected lanes or tiles");
}

}  // namespace cohort::models::cuda
