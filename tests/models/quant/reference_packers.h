// The tests' own packers for the checkpoint formats cohort reads, written
// from the reference implementations' description (not by calling
// models/quant), each with the dequantized matrix its definition gives:
//
//   GPTQ: AutoGPTQ's QuantLinear.pack: `qweight[row] |= intweight[j] <<
//         (bits * (j - i))` over the 32/bits input rows of a word, the same
//         along out for qzeros, stored minus one in the "gptq" (v1) format;
//         W[n, k] = scale[g_idx[k], n] * (q[k, n] - zero[g_idx[k], n]).
//   AWQ:  AutoAWQ's WQLinear_GEMM.from_linear: nibble i of a word takes
//         output column col * 8 + {0, 2, 4, 6, 1, 3, 5, 7}[i];
//         W[n, k] = (q[k, n] - zero[k / group, n]) * scale[k / group, n].
//   FP8:  e4m3 bytes and a scale per 128 x 128 tile / tensor / row;
//         W = e4m3(byte) * scale.
#pragma once

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "tests/models/quant/quant_test_data.h"

namespace cohort::models::quant::testing {

// Integer weights q [in][out] with zero points and fp16 scales per group,
// and act-order's g_idx when asked.
struct IntegerWeight {
  int64_t out = 0, in = 0, group = 0;
  std::vector<std::vector<int>> q;        // [in][out]
  std::vector<std::vector<int>> zero;     // [groups][out]
  std::vector<std::vector<float>> scale;  // [groups][out], fp16 values
  std::vector<int32_t> g_idx;             // [in]
};

inline IntegerWeight random_integer_weight(int64_t out, int64_t in, int64_t group, int bits,
                                           int min_zero, bool act_order, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int levels = 1 << bits;
  const int64_t groups = (in + group - 1) / group;
  IntegerWeight w{out, in, group, {}, {}, {}, {}};
  w.q.assign(static_cast<size_t>(in), std::vector<int>(static_cast<size_t>(out)));
  for (auto& row : w.q)
    for (int& v : row) v = int(rng() % levels);
  w.zero.assign(static_cast<size_t>(groups), std::vector<int>(static_cast<size_t>(out)));
  for (auto& row : w.zero)
    for (int& v : row) v = min_zero + int(rng() % (levels - min_zero));
  std::uniform_real_distribution<float> s(1e-3f, 2e-2f);
  w.scale.assign(static_cast<size_t>(groups), std::vector<float>(static_cast<size_t>(out)));
  for (auto& row : w.scale)
    for (float& v : row) v = fp16_value(s(rng));
  // Act-order quantizes columns in a permuted order and numbers groups along
  // it: g_idx[k] = (position of column k in that order) / group.
  std::vector<int64_t> order(static_cast<size_t>(in));
  std::iota(order.begin(), order.end(), 0);
  if (act_order) std::shuffle(order.begin(), order.end(), rng);
  w.g_idx.resize(static_cast<size_t>(in));
  for (int64_t position = 0; position < in; ++position)
    w.g_idx[static_cast<size_t>(order[static_cast<size_t>(position)])] = int32_t(position / group);
  return w;
}

// W[n, k] by the definition; GPTQ reads the group from g_idx, AWQ from k / group.
inline float integer_weight_value(const IntegerWeight& w, int64_t n, int64_t k, bool by_g_idx) {
  const int64_t g = by_g_idx ? w.g_idx[static_cast<size_t>(k)] : k / w.group;
  return w.scale[static_cast<size_t>(g)][static_cast<size_t>(n)] *
         float(w.q[static_cast<size_t>(k)][static_cast<size_t>(n)] -
               w.zero[static_cast<size_t>(g)][static_cast<size_t>(n)]);
}

inline std::vector<float> integer_weight_matrix(const IntegerWeight& w, bool by_g_idx) {
  std::vector<float> m(static_cast<size_t>(w.out * w.in));
  for (int64_t n = 0; n < w.out; ++n)
    for (int64_t k = 0; k < w.in; ++k)
      m[static_cast<size_t>(n * w.in + k)] = integer_weight_value(w, n, k, by_g_idx);
  return m;
}

// A checkpoint's tensors: little-endian int32 words as bytes, scales as floats.
struct PackedTensors {
  std::vector<uint8_t> qweight, qzeros;
  std::vector<float> scales;  // [groups, out]
  std::vector<int32_t> g_idx;
};

inline PackedTensors pack_gptq_reference(const IntegerWeight& w, int bits,
                                         bool stores_zero_minus_one) {
  const int per = 32 / bits;
  PackedTensors t;
  for (int64_t word_row = 0; word_row < w.in / per; ++word_row) {
    for (int64_t n = 0; n < w.out; ++n) {
      uint32_t word = 0;
      for (int j = 0; j < per; ++j)
        word |= uint32_t(w.q[static_cast<size_t>(word_row * per + j)][static_cast<size_t>(n)])
                << (bits * j);
      push_word(t.qweight, word);
    }
  }
  const int offset = stores_zero_minus_one ? 1 : 0;
  for (const auto& zero_row : w.zero) {
    for (int64_t col = 0; col < w.out / per; ++col) {
      uint32_t word = 0;
      for (int j = 0; j < per; ++j)
        word |= uint32_t(zero_row[static_cast<size_t>(col * per + j)] - offset) << (bits * j);
      push_word(t.qzeros, word);
    }
  }
  for (const auto& row : w.scale) t.scales.insert(t.scales.end(), row.begin(), row.end());
  t.g_idx = w.g_idx;
  return t;
}

inline PackedTensors pack_awq_reference(const IntegerWeight& w) {
  constexpr int order_map[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  PackedTensors t;
  auto pack_rows = [&](const std::vector<std::vector<int>>& values, std::vector<uint8_t>& bytes) {
    for (const auto& row : values) {
      for (int64_t col = 0; col < w.out / 8; ++col) {
        uint32_t word = 0;
        for (int i = 0; i < 8; ++i)
          word |= uint32_t(row[static_cast<size_t>(col * 8 + order_map[i])]) << (4 * i);
        push_word(bytes, word);
      }
    }
  };
  pack_rows(w.q, t.qweight);
  pack_rows(w.zero, t.qzeros);
  for (const auto& row : w.scale) t.scales.insert(t.scales.end(), row.begin(), row.end());
  return t;
}

}  // namespace cohort::models::quant::testing
