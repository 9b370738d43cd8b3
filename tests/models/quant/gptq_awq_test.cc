// GPTQ and AWQ: the tests pack random integer weights, zero points and fp16
// scales as AutoGPTQ's QuantLinear.pack and AutoAWQ's WQLinear_GEMM.from_linear
// describe it (loops over words and shifts, written here from that
// description), and the library's dequantization must give
// scale * (q - zero) for every element: GPTQ with sequential groups and with
// act-order's permuted g_idx, both zero conventions, 4 and 8 bits; AWQ with
// its interleaved nibble order.
#include <gtest/gtest.h>

#include <cstring>

#include "models/quant/quantized_weight.h"
#include "tests/models/quant/reference_packers.h"

namespace cohort::models::quant {
namespace {

using testing::IntegerWeight;
using testing::PackedTensors;
using testing::random_integer_weight;

QuantizedWeight gptq_weight(const IntegerWeight& w, int bits, GptqZeros zeros) {
  const PackedTensors t =
      testing::pack_gptq_reference(w, bits, zeros == GptqZeros::kStoredMinusOne);
  QuantizedWeight q;
  q.format = WeightFormat::kGptq;
  q.name = "model.layers.3.self_attn.o_proj.weight";
  q.rows = w.out, q.cols = w.in, q.bits = bits, q.group_size = w.group;
  q.gptq_zeros = zeros;
  q.packed = t.qweight, q.zeros = t.qzeros, q.scales = t.scales, q.g_idx = t.g_idx;
  return q;
}

QuantizedWeight awq_weight(const IntegerWeight& w) {
  const PackedTensors t = testing::pack_awq_reference(w);
  QuantizedWeight q;
  q.format = WeightFormat::kAwq;
  q.name = "model.layers.1.mlp.down_proj.weight";
  q.rows = w.out, q.cols = w.in, q.bits = 4, q.group_size = w.group;
  q.packed = t.qweight, q.zeros = t.qzeros, q.scales = t.scales;
  return q;
}

void expect_dequantizes_to(const QuantizedWeight& q, const IntegerWeight& w, bool by_g_idx) {
  std::vector<float> out(static_cast<size_t>(w.out * w.in));
  const Status s = dequantize(q, out.data());
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  for (int64_t n = 0; n < w.out; ++n)
    for (int64_t k = 0; k < w.in; ++k)
      ASSERT_EQ(out[size_t(n * w.in + k)], testing::integer_weight_value(w, n, k, by_g_idx))
          << "row " << n << " col " << k;
}

TEST(Gptq, Int4Group128DequantizesToScaleTimesValueMinusZero) {
  const IntegerWeight w = random_integer_weight(64, 256, 128, 4, 1, /*act_order=*/false, 1);
  expect_dequantizes_to(gptq_weight(w, 4, GptqZeros::kStoredMinusOne), w, true);
}

TEST(Gptq, ActOrderReadsEachColumnsGroupFromGIdx) {
  const IntegerWeight w = random_integer_weight(32, 384, 128, 4, 1, /*act_order=*/true, 2);
  const QuantizedWeight q = gptq_weight(w, 4, GptqZeros::kStoredMinusOne);
  EXPECT_NE(q.describe().find("act-order"), std::string::npos) << q.describe();
  expect_dequantizes_to(q, w, true);
}

TEST(Gptq, V2CheckpointsStoreTheZeroItself) {
  // Zero 0 is representable only in v2 (v1 would store -1).
  const IntegerWeight w = random_integer_weight(16, 128, 32, 4, 0, true, 3);
  expect_dequantizes_to(gptq_weight(w, 4, GptqZeros::kStored), w, true);
}

TEST(Gptq, EightBitPacksFourValuesAWord) {
  const IntegerWeight w = random_integer_weight(24, 64, 32, 8, 1, false, 4);
  expect_dequantizes_to(gptq_weight(w, 8, GptqZeros::kStoredMinusOne), w, true);
}

TEST(Gptq, APartialLastGroupHasItsOwnScales) {
  // in 200 with group 128: two groups, the second of 72 columns.
  const IntegerWeight w = random_integer_weight(8, 200, 128, 4, 1, false, 5);
  expect_dequantizes_to(gptq_weight(w, 4, GptqZeros::kStoredMinusOne), w, true);
}

TEST(Gptq, RowRangesMatchTheWholeMatrix) {
  const IntegerWeight w = random_integer_weight(40, 128, 64, 4, 1, true, 6);
  const QuantizedWeight q = gptq_weight(w, 4, GptqZeros::kStoredMinusOne);
  std::vector<float> part(static_cast<size_t>(13 * w.in));
  ASSERT_TRUE(dequantize_rows(q, 20, 33, part.data()).is_ok());
  for (int64_t n = 20; n < 33; ++n)
    for (int64_t k = 0; k < w.in; ++k)
      ASSERT_EQ(part[size_t((n - 20) * w.in + k)], testing::integer_weight_value(w, n, k, true));
}

TEST(Awq, GemmPackingDequantizesWithTheInterleavedNibbleOrder) {
  const IntegerWeight w = random_integer_weight(64, 256, 128, 4, 0, false, 7);
  expect_dequantizes_to(awq_weight(w), w, false);
}

TEST(Awq, EveryColumnOfAWordComesFromItsOwnNibble) {
  // One word row, values 0..7 in logical column order: the packed word must
  // be 0x75316420 (nibbles hold columns 0,2,4,6,1,3,5,7).
  IntegerWeight w = random_integer_weight(8, 32, 32, 4, 0, false, 8);
  for (int c = 0; c < 8; ++c) w.q[0][size_t(c)] = c;
  const QuantizedWeight q = awq_weight(w);
  uint32_t word;
  std::memcpy(&word, q.packed.data(), 4);
  EXPECT_EQ(word, 0x75316420u);
  expect_dequantizes_to(q, w, false);
}

}  // namespace
}  // namespace cohort::models::quant
