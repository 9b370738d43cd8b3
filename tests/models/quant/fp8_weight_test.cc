// FP8 weights: block-scaled, per-tensor and per-channel dequantization equal
// e4m3(bits) * scale of the element's tile / tensor / row on arbitrary bytes;
// block quantization follows transformers' recipe and stays within its bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "models/quant/fp8_e4m3.h"
#include "models/quant/quantized_weight.h"
#include "tests/models/quant/quant_test_data.h"

namespace cohort::models::quant {
namespace {

using testing::e4m3_reference;

// Random finite e4m3 bytes and random fp32 scales: a checkpoint's tensors.
QuantizedWeight random_fp8(WeightFormat format, int64_t rows, int64_t cols, int64_t block,
                           uint64_t seed) {
  std::mt19937_64 rng(seed);
  QuantizedWeight w;
  w.format = format;
  w.name = "model.layers.0.mlp.up_proj.weight";
  w.rows = rows, w.cols = cols, w.bits = 8;
  w.block_rows = w.block_cols = block;
  for (int64_t i = 0; i < rows * cols; ++i) {
    uint8_t b;
    do b = uint8_t(rng());
    while ((b & 0x7f) == 0x7f);
    w.packed.push_back(b);
  }
  size_t scales = 1;
  if (format == WeightFormat::kFp8Channel) scales = size_t(rows);
  if (format == WeightFormat::kFp8Block)
    scales = size_t(((rows + block - 1) / block) * ((cols + block - 1) / block));
  std::uniform_real_distribution<float> scale(1e-4f, 1e-2f);
  for (size_t i = 0; i < scales; ++i) w.scales.push_back(scale(rng));
  return w;
}

TEST(Fp8Weight, BlockScaledDequantizationIsTheTileScaleTimesTheValue) {
  // 300 x 260 with 128 x 128 tiles: partial tiles at the bottom and right,
  // as transformers' ceil-divided weight_scale_inv covers them.
  const QuantizedWeight w = random_fp8(WeightFormat::kFp8Block, 300, 260, 128, 1);
  std::vector<float> out(300 * 260);
  ASSERT_TRUE(dequantize(w, out.data()).is_ok());
  const int64_t tiles_per_row = 3;
  for (int64_t r = 0; r < 300; ++r) {
    for (int64_t c = 0; c < 260; ++c) {
      const float scale = w.scales[(r / 128) * tiles_per_row + c / 128];
      ASSERT_EQ(out[r * 260 + c], float(e4m3_reference(w.packed[r * 260 + c])) * scale)
          << r << "," << c;
    }
  }
}

TEST(Fp8Weight, PerTensorAndPerChannelScalesMultiplyEveryValue) {
  for (WeightFormat format : {WeightFormat::kFp8Tensor, WeightFormat::kFp8Channel}) {
    const QuantizedWeight w = random_fp8(format, 48, 40, 0, 2);
    std::vector<float> out(48 * 40);
    ASSERT_TRUE(dequantize(w, out.data()).is_ok());
    for (int64_t r = 0; r < 48; ++r)
      for (int64_t c = 0; c < 40; ++c) {
        const float scale = format == WeightFormat::kFp8Tensor ? w.scales[0] : w.scales[r];
        ASSERT_EQ(out[r * 40 + c], float(e4m3_reference(w.packed[r * 40 + c])) * scale);
      }
  }
}

TEST(Fp8Weight, RowRangesAndBf16AgreeWithTheWholeDequantization) {
  const QuantizedWeight w = random_fp8(WeightFormat::kFp8Block, 130, 64, 128, 3);
  std::vector<float> all(130 * 64), part(7 * 64);
  ASSERT_TRUE(dequantize(w, all.data()).is_ok());
  ASSERT_TRUE(dequantize_rows(w, 125, 130, part.data()).is_ok());
  for (int i = 0; i < 5 * 64; ++i) EXPECT_EQ(part[i], all[125 * 64 + i]);
  std::vector<uint16_t> bf16(130 * 64);
  ASSERT_TRUE(dequantize_bf16(w, bf16.data()).is_ok());
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(bf16[i], float_to_bf16_bits(all[i]));
}

// transformers' FineGrainedFP8HfQuantizer: per tile scale = 448 / amax,
// q = e4m3(clamp(w * scale)), weight_scale_inv = 1 / scale.
TEST(Fp8Weight, BlockQuantizationFollowsTransformersRecipe) {
  const int64_t rows = 200, cols = 136;
  std::vector<float> x = testing::random_weights(rows * cols, 4);
  x[5] = 0.9f;  // one outlier sets its tile's scale
  auto q = quantize(WeightFormat::kFp8Block, "w", x.data(), rows, cols);
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  ASSERT_EQ(q->scales.size(), 4u);  // ceil(200/128) x ceil(136/128)
  for (int64_t tr = 0; tr < 2; ++tr) {
    for (int64_t tc = 0; tc < 2; ++tc) {
      float amax = 0;
      for (int64_t r = tr * 128; r < std::min(rows, tr * 128 + 128); ++r)
        for (int64_t c = tc * 128; c < std::min(cols, tc * 128 + 128); ++c)
          amax = std::max(amax, std::fabs(x[r * cols + c]));
      const float scale = 448.0f / amax;
      EXPECT_EQ(q->scales[tr * 2 + tc], 1.0f / scale);
      for (int64_t r = tr * 128; r < std::min(rows, tr * 128 + 128); ++r)
        for (int64_t c = tc * 128; c < std::min(cols, tc * 128 + 128); ++c)
          ASSERT_EQ(q->packed[r * cols + c],
                    float_to_e4m3(std::clamp(x[r * cols + c] * scale, -448.0f, 448.0f)));
    }
  }
}

// The bound: e4m3 keeps 3 mantissa bits, so a normal value is off by at most
// 2^-4 of itself; a subnormal one by half the step 2^-9, i.e. 2^-10 in the
// tile's scaled units (times scale_inv back in weight units); the fp32
// scaling adds under 2^-20 relative.
TEST(Fp8Weight, BlockRoundTripStaysWithinTheE4m3Bound) {
  const int64_t rows = 256, cols = 384;
  std::vector<float> x = testing::random_weights(rows * cols, 5, 0.02f);
  for (int i = 0; i < 50; ++i) x[size_t(i) * 977 % x.size()] *= 40.0f;  // outliers
  auto q = quantize(WeightFormat::kFp8Block, "w", x.data(), rows, cols);
  ASSERT_TRUE(q.is_ok());
  std::vector<float> back(x.size());
  ASSERT_TRUE(dequantize(*q, back.data()).is_ok());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float s_inv = q->scales[(r / 128) * 3 + c / 128];
      const double err = std::fabs(double(back[r * cols + c]) - x[r * cols + c]);
      const double bound = std::fabs(x[r * cols + c]) * (0x1p-4 + 0x1p-20) + 0x1p-10 * s_inv;
      ASSERT_LE(err, bound) << r << "," << c;
    }
  }
}

TEST(Fp8Weight, AnAllZeroTileQuantizesToZeros) {
  std::vector<float> x(128 * 128, 0.0f);
  auto q = quantize(WeightFormat::kFp8Block, "w", x.data(), 128, 128);
  ASSERT_TRUE(q.is_ok());
  std::vector<float> back(x.size(), 1.0f);
  ASSERT_TRUE(dequantize(*q, back.data()).is_ok());
  for (float v : back) ASSERT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace cohort::models::quant
