// The row layout the CUDA projections read (models/quant/row_packed.h):
// every format (NF4's table of levels included) packs to codes, scales and
// zeros whose dequantization equals the format's own, bit for bit; what it
// cannot hold is refused by name.
#include <gtest/gtest.h>

#include <array>
#include <cstring>

#include "models/quant/row_packed.h"
#include "tests/models/quant/reference_packers.h"

namespace cohort::models::quant {
namespace {

constexpr int64_t kRows = 40, kCols = 256;

QuantizedWeight integer_checkpoint(WeightFormat format, int bits, int64_t group, bool act_order,
                                   GptqZeros zeros, uint64_t seed) {
  const bool gptq = format == WeightFormat::kGptq;
  const testing::IntegerWeight iw =
      testing::random_integer_weight(kRows, kCols, group, bits, gptq && zeros == GptqZeros::kStoredMinusOne,
                                     act_order, seed);
  const testing::PackedTensors t =
      gptq ? testing::pack_gptq_reference(iw, bits, zeros == GptqZeros::kStoredMinusOne)
           : testing::pack_awq_reference(iw);
  QuantizedWeight w;
  w.format = format, w.name = "model.layers.0.self_attn.q_proj.weight";
  w.rows = kRows, w.cols = kCols, w.bits = bits, w.group_size = group;
  w.packed = t.qweight, w.zeros = t.qzeros, w.scales = t.scales, w.gptq_zeros = zeros;
  if (gptq) w.g_idx = t.g_idx;
  return w;
}

QuantizedWeight made(WeightFormat format, uint64_t seed, int64_t group = 128) {
  const std::vector<float> x = testing::random_weights(kRows * kCols, seed);
  QuantizeOptions options;
  options.group_size = group;
  return *quantize(format, "model.layers.0.mlp.down_proj.weight", x.data(), kRows, kCols, options);
}

QuantizedWeight e4m3_with_scales(WeightFormat format, uint64_t seed) {
  QuantizedWeight w = made(WeightFormat::kFp8Block, seed);
  w.format = format;
  w.scales = format == WeightFormat::kFp8Tensor ? std::vector<float>{0.0173f}
                                                : testing::random_weights(kRows, seed + 1, 0.02f);
  for (float& s : w.scales) s = std::abs(s) + 1e-4f;
  w.block_rows = w.block_cols = 0;
  return w;
}

void expect_same_numbers(const QuantizedWeight& w) {
  auto packed = pack_rows(w);
  ASSERT_TRUE(packed.is_ok()) << w.describe() << ": " << packed.status().to_string();
  std::vector<float> want(size_t(kRows * kCols)), got(want.size());
  ASSERT_TRUE(dequantize(w, want.data()).is_ok());
  dequantize(*packed, got.data());
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0) << w.describe();
  EXPECT_EQ(packed->codes.size(), size_t(kRows * kCols * code_bits(packed->kind) / 8));
  EXPECT_EQ(packed->format, w.describe());
}

TEST(RowPacked, EveryAffineFormatDequantizesAsItsOwnDefinition) {
  expect_same_numbers(made(WeightFormat::kInt8, 1));
  expect_same_numbers(made(WeightFormat::kInt4, 2));
  expect_same_numbers(made(WeightFormat::kInt4, 3, 64));
  expect_same_numbers(made(WeightFormat::kFp8Block, 4));
  expect_same_numbers(e4m3_with_scales(WeightFormat::kFp8Tensor, 5));
  expect_same_numbers(e4m3_with_scales(WeightFormat::kFp8Channel, 6));
  for (GptqZeros zeros : {GptqZeros::kStoredMinusOne, GptqZeros::kStored}) {
    expect_same_numbers(integer_checkpoint(WeightFormat::kGptq, 4, 128, false, zeros, 7));
    expect_same_numbers(integer_checkpoint(WeightFormat::kGptq, 8, 64, false, zeros, 8));
  }
  expect_same_numbers(integer_checkpoint(WeightFormat::kAwq, 4, 64, false, GptqZeros::kStored, 9));
  expect_same_numbers(made(WeightFormat::kNf4, 12));
}

TEST(RowPacked, CodesAndZerosAreTheFormatsOwn) {
  // cohort's int4 is symmetric: codes q + 8 around a zero of 8.
  const QuantizedWeight int4 = made(WeightFormat::kInt4, 10);
  auto packed = pack_rows(int4);
  ASSERT_TRUE(packed.is_ok());
  EXPECT_EQ(packed->kind, CodeKind::kUint4);
  for (float z : packed->zeros) ASSERT_EQ(z, 8.0f);
  const int q0 = (int4.packed[0] & 0xf) >= 8 ? (int4.packed[0] & 0xf) - 16 : (int4.packed[0] & 0xf);
  EXPECT_EQ(packed->codes[0] & 0xf, q0 + 8);
  // e4m3 keeps its bytes and needs no zeros.
  const QuantizedWeight fp8 = made(WeightFormat::kFp8Block, 11);
  auto e4m3 = pack_rows(fp8);
  ASSERT_TRUE(e4m3.is_ok());
  EXPECT_EQ(e4m3->codes, fp8.packed);
  EXPECT_TRUE(e4m3->zeros.empty());
  EXPECT_EQ(e4m3->scales[0], fp8.scales[0]);
}

TEST(RowPacked, WhatTheLayoutCannotHoldIsRefusedByName) {
  auto refused = [](const QuantizedWeight& w, const std::string& why) {
    auto r = pack_rows(w);
    ASSERT_FALSE(r.is_ok()) << w.describe();
    EXPECT_NE(r.status().message().find(w.name), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  };
  refused(integer_checkpoint(WeightFormat::kGptq, 4, 64, true, GptqZeros::kStored, 13), "act-order");
  refused(made(WeightFormat::kInt4, 14, 16), "multiples of 32");
  // GPTQ checkpoints written without act-order still store g_idx = k / group: accepted.
  QuantizedWeight plain = integer_checkpoint(WeightFormat::kGptq, 4, 64, false, GptqZeros::kStored, 15);
  ASSERT_FALSE(plain.g_idx.empty());
  EXPECT_TRUE(pack_rows(plain).is_ok());
}

TEST(RowPacked, StackedWeightsAreTheirPartsOneAboveTheOther) {
  auto gptq = pack_rows(integer_checkpoint(WeightFormat::kGptq, 4, 128, false, GptqZeros::kStored, 16));
  auto int4 = pack_rows(made(WeightFormat::kInt4, 17));
  ASSERT_TRUE(gptq.is_ok() && int4.is_ok());
  auto stacked = stack_rows({*gptq, *int4});
  ASSERT_TRUE(stacked.is_ok()) << stacked.status().to_string();
  EXPECT_EQ(stacked->rows, 2 * kRows);
  std::vector<float> a(size_t(kRows * kCols)), b(a.size()), both(2 * a.size());
  dequantize(*gptq, a.data());
  dequantize(*int4, b.data());
  dequantize(*stacked, both.data());
  EXPECT_EQ(std::memcmp(both.data(), a.data(), a.size() * 4), 0);
  EXPECT_EQ(std::memcmp(both.data() + a.size(), b.data(), b.size() * 4), 0);
  auto fp8 = pack_rows(made(WeightFormat::kFp8Block, 18));
  auto mixed = stack_rows({*int4, *fp8});
  ASSERT_FALSE(mixed.is_ok());
  EXPECT_NE(mixed.status().message().find("does not stack"), std::string::npos);
}

// The tensor-core decode form skips the zeros of a centred weight, so only
// a weight whose every zero is 8 may be called centred.
TEST(RowPacked, OnlyFourBitWeightsWhoseZerosAreAllEightAreCentred) {
  auto int4 = pack_rows(made(WeightFormat::kInt4, 21));
  auto int8 = pack_rows(made(WeightFormat::kInt8, 22));
  auto fp8 = pack_rows(made(WeightFormat::kFp8Block, 23));
  auto gptq = pack_rows(integer_checkpoint(WeightFormat::kGptq, 4, 128, false, GptqZeros::kStored, 24));
  ASSERT_TRUE(int4.is_ok() && int8.is_ok() && fp8.is_ok() && gptq.is_ok());
  EXPECT_TRUE(centred_uint4(*int4));
  EXPECT_TRUE(view_of(*int4).centred);
  EXPECT_FALSE(centred_uint4(*int8));   // zeros of 128
  EXPECT_FALSE(centred_uint4(*fp8));    // no zeros
  EXPECT_FALSE(centred_uint4(*gptq));   // the checkpoint's own zeros
  RowPackedWeight one_off = *int4;
  one_off.zeros.back() = 7.0f;
  EXPECT_FALSE(centred_uint4(one_off));
  EXPECT_FALSE(view_of(one_off).centred);
}

TEST(RowPacked, ASliceIsTheSameCutOfTheDequantizedWeight) {
  for (const QuantizedWeight& w : {made(WeightFormat::kInt4, 20), made(WeightFormat::kFp8Block, 21),
                                   integer_checkpoint(WeightFormat::kGptq, 4, 64, false, GptqZeros::kStored, 22)}) {
    auto packed = pack_rows(w);
    ASSERT_TRUE(packed.is_ok());
    std::vector<float> whole(size_t(kRows * kCols));
    dequantize(*packed, whole.data());
    // A column-parallel rank's rows, and a row-parallel rank's columns.
    for (auto [r0, rows, c0, cols] : {std::array<int64_t, 4>{8, 16, 0, kCols}, std::array<int64_t, 4>{0, kRows, 128, 128}}) {
      auto cut = slice(*packed, r0, rows, c0, cols);
      ASSERT_TRUE(cut.is_ok()) << cut.status().to_string();
      std::vector<float> got(size_t(rows * cols));
      dequantize(*cut, got.data());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(got[size_t(r * cols + c)], whole[size_t((r0 + r) * kCols + c0 + c)]) << w.describe();
    }
    auto split = slice(*packed, 0, kRows, 32, 96);
    ASSERT_FALSE(split.is_ok());
    EXPECT_NE(split.status().message().find("splits its groups"), std::string::npos);
  }
}

}  // namespace
}  // namespace cohort::models::quant

namespace cohort::models::quant {
namespace {

// Weights of a million elements or more are quantized, dequantized and
// packed in row chunks over the cores: the result is the one-thread result.
TEST(RowPacked, LargeWeightsSpreadOverTheCoresGiveTheOneThreadResult) {
  constexpr int64_t kRows = 1536, kCols = 768, kHalf = kRows / 2;  // 1.18M elements; halves under 1M
  const std::vector<float> x = testing::random_weights(kRows * kCols, 21);
  for (WeightFormat format : {WeightFormat::kInt4, WeightFormat::kInt8}) {
    const QuantizedWeight whole = *quantize(format, "w", x.data(), kRows, kCols);
    const QuantizedWeight top = *quantize(format, "w", x.data(), kHalf, kCols);
    const QuantizedWeight bottom = *quantize(format, "w", x.data() + kHalf * kCols, kHalf, kCols);
    std::vector<uint8_t> packed = top.packed;
    packed.insert(packed.end(), bottom.packed.begin(), bottom.packed.end());
    std::vector<float> scales = top.scales;
    scales.insert(scales.end(), bottom.scales.begin(), bottom.scales.end());
    EXPECT_EQ(whole.packed, packed) << to_string(format);
    EXPECT_EQ(whole.scales, scales) << to_string(format);
  }
  for (WeightFormat format : {WeightFormat::kInt4, WeightFormat::kInt8, WeightFormat::kFp8Block, WeightFormat::kNf4}) {
    const QuantizedWeight w = *quantize(format, "w", x.data(), kRows, kCols);
    std::vector<float> whole(size_t(kRows * kCols)), rows(whole.size()), from_layout(whole.size());
    ASSERT_TRUE(dequantize(w, whole.data()).is_ok());
    ASSERT_TRUE(dequantize_rows(w, 0, kHalf, rows.data()).is_ok());
    ASSERT_TRUE(dequantize_rows(w, kHalf, kRows, rows.data() + kHalf * kCols).is_ok());
    EXPECT_EQ(whole, rows) << to_string(format);
    auto packed = pack_rows(w);
    ASSERT_TRUE(packed.is_ok()) << packed.status().to_string();
    dequantize(*packed, from_layout.data());
    EXPECT_EQ(std::memcmp(whole.data(), from_layout.data(), whole.size() * 4), 0) << to_string(format);
    std::vector<uint16_t> bf16(whole.size());
    ASSERT_TRUE(dequantize_bf16(w, bf16.data()).is_ok());
    for (size_t i = 0; i < whole.size(); i += 997) ASSERT_EQ(bf16[i], float_to_bf16_bits(whole[i])) << i;
  }
}

// The FP8 GEMM's view of the scales (fp8_block_scales): an fp8-block
// weight gives one scale per 128 x 128 tile, its rows padded to a multiple
// of 4 blocks; per-channel scales and other codes have none.
TEST(Fp8BlockScales, ATiledWeightGivesItsTilesScalesInPaddedRows) {
  const int64_t rows = 256, cols = 384;  // 2 x 3 tiles, rows padded to 4
  const std::vector<float> x = testing::random_weights(rows * cols, 11);
  auto q = quantize(WeightFormat::kFp8Block, "w", x.data(), rows, cols);
  ASSERT_TRUE(q.is_ok()) << q.status().message();
  auto packed = pack_rows(*q);
  ASSERT_TRUE(packed.is_ok()) << packed.status().message();
  const auto blocks = fp8_block_scales(*packed);
  ASSERT_TRUE(blocks.has_value());
  ASSERT_EQ(blocks->size(), 2u * 4);
  for (int64_t br = 0; br < 2; ++br) {
    for (int64_t bc = 0; bc < 3; ++bc) {
      // The checkpoint's tile scale is every row's scale of that group.
      EXPECT_EQ((*blocks)[size_t(br * 4 + bc)], q->scales[size_t(br * 3 + bc)]) << br << ", " << bc;
      EXPECT_EQ((*blocks)[size_t(br * 4 + bc)], packed->scales[size_t(br * 128 * 3 + bc)]);
    }
    EXPECT_EQ((*blocks)[size_t(br * 4 + 3)], 0.0f);
  }
}

TEST(Fp8BlockScales, RowsWithTheirOwnScalesOrOtherCodesHaveNone) {
  const int64_t rows = 128, cols = 256;
  const std::vector<float> x = testing::random_weights(rows * cols, 12);
  auto q = quantize(WeightFormat::kFp8Block, "w", x.data(), rows, cols);
  ASSERT_TRUE(q.is_ok());
  auto packed = pack_rows(*q);
  ASSERT_TRUE(packed.is_ok());
  ASSERT_TRUE(fp8_block_scales(*packed).has_value());
  RowPackedWeight channel = *packed;
  channel.scales[size_t(5 * channel.groups() + 1)] *= 2.0f;  // row 5 differs from row 0 of its tile
  EXPECT_FALSE(fp8_block_scales(channel).has_value());
  RowPackedWeight partial = *packed;
  partial.rows = 64, partial.codes.resize(size_t(64 * cols)), partial.scales.resize(size_t(64 * partial.groups()));
  EXPECT_FALSE(fp8_block_scales(partial).has_value());  // half a tile of rows
  auto int8 = quantize(WeightFormat::kInt8, "w", x.data(), rows, cols);
  ASSERT_TRUE(int8.is_ok());
  EXPECT_FALSE(fp8_block_scales(*pack_rows(*int8)).has_value());
}

}  // namespace
}  // namespace cohort::models::quant
