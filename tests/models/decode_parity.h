// What the decode kernels' parity tests share (decode_ops_parity_test.cc,
// decode_projection_parity_test.cc, kv_fp8_parity_test.cc): bf16
// conversions, the tolerance, a fixture with a CUDA backend that skips
// where no GPU is visible, and the rows and cache layouts of the attention
// tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/half_float.h"
#include "models/cuda_backend.h"
#include "models/config.h"
#include "models/ops/decode_attention.h"
#include "models/ops/rope.h"
#include "tests/models/cuda_backend_test.h"
#include "tests/models/grad_check.h"

namespace cohort::models::decode_parity {

constexpr double kBf16Tol = 1e-2;
constexpr uint16_t kBf16NaN = 0x7fc0;

// Norm-relative error; infinite when `got` holds a NaN (an unwritten element).
using testing::norm_relative;

inline std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = float_to_bf16_bits(v[i]);
  return out;
}
inline std::vector<float> from_bf16(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = bf16_bits_to_float(v[i]);
  return out;
}
// v rounded through bf16, as a kernel reading a bf16 copy of it sees it.
inline std::vector<float> rounded(const std::vector<float>& v) {
  return from_bf16(to_bf16(v));
}

class DecodeOpsParity : public testing::CudaBackendTest {
 protected:
  DecodeOpsParity() : CudaBackendTest("decode kernel parity tests") {}
  void SetUp() override {
    CudaBackendTest::SetUp();
    if (!IsSkipped()) stream_ = static_cast<CUstream_st*>(gpu_->stream());
  }
  // Attention's split scratch, its counts zeroed once: every launch must
  // leave them at zero for the next.
  cuda::DecodeAttentionScratch attention_scratch() {
    if (scratch_.partials == nullptr) {
      scratch_.partials = up(std::vector<float>(cuda::kDecodeAttnScratchFloats, NAN));
      scratch_.arrivals = up(std::vector<int>(cuda::kDecodeAttnScratchBlocks, 0));
    }
    return scratch_;
  }
  CUstream_st* stream_ = nullptr;
  cuda::DecodeAttentionScratch scratch_;
};

// Both kernels, where the head size lets the tiles form run (elsewhere both
// names run the lanes form).
constexpr cuda::DecodeAttentionForm kAttentionForms[] = {cuda::DecodeAttentionForm::kLanes,
                                                         cuda::DecodeAttentionForm::kTiles};
inline std::string form_name(cuda::DecodeAttentionForm form) {
  return form == cuda::DecodeAttentionForm::kTiles ? "tiles form" : "lanes form";
}

// A decode batch's rows: distinct slots at various positions, plus a packed
// prefill's consecutive positions in one slot.
struct Rows {
  std::vector<int32_t> tokens, slots, positions;
  // Appends `count` prompt rows of `slot` at positions first, first + 1, ...
  // (token 0): a prefill chunk as the step builds it.
  void add_run(int slot, int first, int count) {
    for (int p = first; p < first + count; ++p) {
      slots.push_back(slot), positions.push_back(p), tokens.push_back(0);
    }
  }
};
inline Rows decode_rows(int slots, int capacity) {
  Rows r;
  for (int s = 0; s < slots; ++s) {
    r.slots.push_back(s);
    r.positions.push_back((s * 37 + 5) % capacity);
  }
  for (int p = 0; p < 6; ++p) r.slots.push_back(slots), r.positions.push_back(p);
  r.tokens.assign(r.slots.size(), 0);
  return r;
}

// RoPE for head_dim D over `capacity` positions (the default base).
inline RopeTable rope_table(int D, int capacity) {
  ModelConfig config;
  config.head_dim = D;
  config.max_seq = capacity;
  return make_rope_table(config);
}

// The paged layout (decode_rows.h) with 16-position blocks handed out in a
// shuffled order, so that no slot's blocks are adjacent or in order; the
// cache holds as many positions as the contiguous one.
struct CacheLayout {
  int block_shift = 0;
  std::vector<int32_t> table;  // [slots, blocks_per_slot]; empty: contiguous
};
inline CacheLayout cache_layout(bool paged, int slots, int capacity) {
  CacheLayout layout;
  if (!paged) return layout;
  layout.block_shift = 4;
  const int per_slot = (capacity + 15) / 16;
  layout.table.resize(size_t(slots) * per_slot);
  for (size_t i = 0; i < layout.table.size(); ++i) layout.table[i] = int32_t(i);
  std::mt19937 shuffle(7);
  std::shuffle(layout.table.begin(), layout.table.end(), shuffle);
  return layout;
}

}  // namespace cohort::models::decode_parity
