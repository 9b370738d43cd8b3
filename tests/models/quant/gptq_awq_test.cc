// GPTQ and AWQ: the tests pack random integer weights, zero points and fp16
// scales as AutoGPTQ's QuantLinear.pack and AutoAWQ's WQLinear_GEMM.from_linear
// describe it (loops over words and shifts, written here from that
// description), and the library's dequantization must give
// scale * (q - zero) for every element: GPTQ with sequential groups and with
// act-order's permuted g_idx, both zero conventions, 4 and 8 bits; AWQ with
// its interleaved nibble order.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "models/quant/quantized_weight.h"
#include "tests/models/quant/quant_test_data.h"

namespace cohort::models::quant {
namespace {

using testing::fp16_value;
using testing::push_word;

struct IntegerWeight {
  int64_t out = 0, in = 0, group = 0;
  std::vector<std::vector<int>> q;       // [in][out]
  std::vector<std::vector<int>> zero;    // [groups][out]
  std::vector<std::vector<float>> scale; // [groups][out], fp16 values
  std::vector<int32_t> g_idx;            // [in]
};

IntegerWeight random_integer_weight(int64_t out, int64_t in, int64_t group, int bits, int min_zero, bool act_order,
                                    uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int levels = 1 << bits;
  const int64_t groups = (in + group - 1) / group;
  IntegerWeight w{out, in, group, {}, {}, {}, {}};
  w.q.assign(size_t(in), std::vector<int>(size_t(out)));
  for (auto& row : w.q)
    for (int& v : row) v = int(rng() % levels);
  w.zero.assign(size_t(groups), std::vector<int>(size_t(out)));
  for (auto& row : w.zero)
    for (int& v : row) v = min_zero + int(rng() % (levels - min_zero));
  std::uniform_real_distribution<float> s(1e-3f, 2e-2f);
  w.scale.assign(size_t(groups), std::vector<float>(size_t(out)));
  for (auto& row : w.scale)
    for (float& v : row) v = fp16_value(s(rng));
  // Act-order quantizes columns in a permuted order and numbers groups along
  // it: g_idx[k] = (position of column k in that order) / group.
  std::vector<int64_t> order(static_cast<size_t>(in));
  std::iota(order.begin(), order.end(), 0);
  if (act_order) std::shuffle(order.begin(), order.end(), rng);
  w.g_idx.resize(size_t(in));
  for (int64_t position = 0; position < in; ++position) w.g_idx[size_t(order[size_t(position)])] = int32_t(position / group);
  return w;
}

float expected(const IntegerWeight& w, int64_t n, int64_t k, bool gptq_index) {
  const int64_t g = gptq_index ? w.g_idx[size_t(k)] : k / w.group;
  return w.scale[size_t(g)][size_t(n)] * float(w.q[size_t(k)][size_t(n)] - w.zero[size_t(g)][size_t(n)]);
}

// AutoGPTQ's pack: `qweight[row] |= intweight[j] << (bits * (j - i))` for the
// 32/bits input rows j of word row i, and the same along out for qzeros,
// which the "gptq" format stores minus one.
QuantizedWeight pack_gptq(const IntegerWeight& w, int bits, GptqZeros zeros) {
  const int per = 32 / bits;
  QuantizedWeight q;
  q.format = WeightFormat::kGptq;
  q.name = "model.layers.3.self_attn.o_proj.weight";
  q.rows = w.out, q.cols = w.in, q.bits = bits, q.group_size = w.group;
  q.gptq_zeros = zeros;
  for (int64_t word_row = 0; word_row < w.in / per; ++word_row) {
    for (int64_t n = 0; n < w.out; ++n) {
      uint32_t word = 0;
      for (int j = 0; j < per; ++j) word |= uint32_t(w.q[size_t(word_row * per + j)][size_t(n)]) << (bits * j);
      push_word(q.packed, word);
    }
  }
  const int stored_offset = zeros == GptqZeros::kStoredMinusOne ? 1 : 0;
  for (const auto& zero_row : w.zero) {
    for (int64_t col = 0; col < w.out / per; ++col) {
      uint32_t word = 0;
      for (int j = 0; j < per; ++j) word |= uint32_t(zero_row[size_t(col * per + j)] - stored_offset) << (bits * j);
      push_word(q.zeros, word);
    }
  }
  for (const auto& row : w.scale) q.scales.insert(q.scales.end(), row.begin(), row.end());
  q.g_idx = w.g_idx;
  return q;
}

void expect_dequantizes_to(const QuantizedWeight& q, const IntegerWeight& w, bool gptq_index) {
  std::vector<float> out(static_cast<size_t>(w.out * w.in));
  const Status s = dequantize(q, out.data());
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  for (int64_t n = 0; n < w.out; ++n)
    for (int64_t k = 0; k < w.in; ++k)
      ASSERT_EQ(out[size_t(n * w.in + k)], expected(w, n, k, gptq_index)) << "row " << n << " col " << k;
}

TEST(Gptq, Int4Group128DequantizesToScaleTimesValueMinusZero) {
  const IntegerWeight w = random_integer_weight(64, 256, 128, 4, 1, /*act_order=*/false, 1);
  expect_dequantizes_to(pack_gptq(w, 4, GptqZeros::kStoredMinusOne), w, true);
}

TEST(Gptq, ActOrderReadsEachColumnsGroupFromGIdx) {
  const IntegerWeight w = random_integer_weight(32, 384, 128, 4, 1, /*act_order=*/true, 2);
  const QuantizedWeight q = pack_gptq(w, 4, GptqZeros::kStoredMinusOne);
  EXPECT_NE(q.describe().find("act-order"), std::string::npos) << q.describe();
  expect_dequantizes_to(q, w, true);
}

TEST(Gptq, V2CheckpointsStoreTheZeroItself) {
  // Zero 0 is representable only in v2 (v1 would store -1).
  const IntegerWeight w = random_integer_weight(16, 128, 32, 4, 0, true, 3);
  expect_dequantizes_to(pack_gptq(w, 4, GptqZeros::kStored), w, true);
}

TEST(Gptq, EightBitPacksFourValuesAWord) {
  const IntegerWeight w = random_integer_weight(24, 64, 32, 8, 1, false, 4);
  expect_dequantizes_to(pack_gptq(w, 8, GptqZeros::kStoredMinusOne), w, true);
}

TEST(Gptq, APartialLastGroupHasItsOwnScales) {
  // in 200 with group 128: two groups, the second of 72 columns.
  const IntegerWeight w = random_integer_weight(8, 200, 128, 4, 1, false, 5);
  expect_dequantizes_to(pack_gptq(w, 4, GptqZeros::kStoredMinusOne), w, true);
}

TEST(Gptq, RowRangesMatchTheWholeMatrix) {
  const IntegerWeight w = random_integer_weight(40, 128, 64, 4, 1, true, 6);
  const QuantizedWeight q = pack_gptq(w, 4, GptqZeros::kStoredMinusOne);
  std::vector<float> part(static_cast<size_t>(13 * w.in));
  ASSERT_TRUE(dequantize_rows(q, 20, 33, part.data()).is_ok());
  for (int64_t n = 20; n < 33; ++n)
    for (int64_t k = 0; k < w.in; ++k) ASSERT_EQ(part[size_t((n - 20) * w.in + k)], expected(w, n, k, true));
}

// AutoAWQ's from_linear: for each word column, nibble i takes output column
// col * 8 + order_map[i], order_map = {0, 2, 4, 6, 1, 3, 5, 7}.
QuantizedWeight pack_awq(const IntegerWeight& w) {
  constexpr int order_map[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  QuantizedWeight q;
  q.format = WeightFormat::kAwq;
  q.name = "model.layers.1.mlp.down_proj.weight";
  q.rows = w.out, q.cols = w.in, q.bits = 4, q.group_size = w.group;
  auto pack_rows = [&](const std::vector<std::vector<int>>& values, std::vector<uint8_t>& bytes) {
    for (const auto& row : values) {
      for (int64_t col = 0; col < w.out / 8; ++col) {
        uint32_t word = 0;
        for (int i = 0; i < 8; ++i) word |= uint32_t(row[size_t(col * 8 + order_map[i])]) << (4 * i);
        push_word(bytes, word);
      }
    }
  };
  pack_rows(w.q, q.packed);
  pack_rows(w.zero, q.zeros);
  for (const auto& row : w.scale) q.scales.insert(q.scales.end(), row.begin(), row.end());
  return q;
}

TEST(Awq, GemmPackingDequantizesWithTheInterleavedNibbleOrder) {
  const IntegerWeight w = random_integer_weight(64, 256, 128, 4, 0, false, 7);
  expect_dequantizes_to(pack_awq(w), w, false);
}

TEST(Awq, EveryColumnOfAWordComesFromItsOwnNibble) {
  // One word row, values 0..7 in logical column order: the packed word must
  // be 0x75316420 (nibbles hold columns 0,2,4,6,1,3,5,7).
  IntegerWeight w = random_integer_weight(8, 32, 32, 4, 0, false, 8);
  for (int c = 0; c < 8; ++c) w.q[0][size_t(c)] = c;
  const QuantizedWeight q = pack_awq(w);
  uint32_t word;
  std::memcpy(&word, q.packed.data(), 4);
  EXPECT_EQ(word, 0x75316420u);
  expect_dequantizes_to(q, w, false);
}

}  // namespace
}  // namespace cohort::models::quant
