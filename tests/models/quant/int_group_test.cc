// cohort's int8 and int4 group formats: dequantization of bytes packed by the
// test equals q * scale; quantization rounds to nearest within scale / 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "models/quant/quantized_weight.h"
#include "tests/models/quant/quant_test_data.h"

namespace cohort::models::quant {
namespace {

struct GroupCase {
  WeightFormat format;
  int64_t rows, cols, group;
};

class IntGroup : public ::testing::TestWithParam<GroupCase> {};

// int8: one two's-complement byte per value; int4: two nibbles a byte, the
// even column low; rows of ceil(cols / 2) bytes.
TEST_P(IntGroup, DequantizationOfTestPackedBytesIsValueTimesGroupScale) {
  const GroupCase c = GetParam();
  const bool int8 = c.format == WeightFormat::kInt8;
  const int64_t groups = (c.cols + c.group - 1) / c.group,
                stride = int8 ? c.cols : (c.cols + 1) / 2;
  std::mt19937 rng(11);
  std::vector<int> values(static_cast<size_t>(c.rows * c.cols));
  for (int& v : values) v = int8 ? int(rng() % 255) - 127 : int(rng() % 16) - 8;
  QuantizedWeight w;
  w.format = c.format;
  w.name = "model.layers.0.self_attn.q_proj.weight";
  w.rows = c.rows, w.cols = c.cols, w.bits = int8 ? 8 : 4, w.group_size = c.group;
  w.packed.assign(size_t(c.rows * stride), 0);
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t k = 0; k < c.cols; ++k) {
      const int v = values[size_t(r * c.cols + k)];
      if (int8)
        w.packed[size_t(r * stride + k)] = uint8_t(int8_t(v));
      else
        w.packed[size_t(r * stride + k / 2)] |= uint8_t((v & 15) << (k % 2 ? 4 : 0));
    }
  std::uniform_real_distribution<float> s(1e-4f, 1e-2f);
  for (int64_t i = 0; i < c.rows * groups; ++i) w.scales.push_back(s(rng));
  std::vector<float> out(static_cast<size_t>(c.rows * c.cols));
  ASSERT_TRUE(dequantize(w, out.data()).is_ok());
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t k = 0; k < c.cols; ++k)
      ASSERT_EQ(out[size_t(r * c.cols + k)],
                float(values[size_t(r * c.cols + k)]) * w.scales[size_t(r * groups + k / c.group)]);
}

// Bound: |w - deq| <= scale / 2 (+ 2^-20 |w| for the division's rounding),
// scale = absmax(group) / 127 (int8) or / 7 (int4), values in [-127, 127] or [-7, 7].
TEST_P(IntGroup, RoundTripIsWithinHalfAScaleStep) {
  const GroupCase c = GetParam();
  const int levels = c.format == WeightFormat::kInt8 ? 127 : 7;
  std::vector<float> x = testing::random_weights(size_t(c.rows * c.cols), 12);
  auto q = quantize(c.format, "w", x.data(), c.rows, c.cols, {.group_size = c.group});
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  std::vector<float> back(x.size());
  ASSERT_TRUE(dequantize(*q, back.data()).is_ok());
  const int64_t groups = (c.cols + c.group - 1) / c.group;
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      float amax = 0;
      for (int64_t k = g * c.group; k < std::min(c.cols, (g + 1) * c.group); ++k)
        amax = std::max(amax, std::fabs(x[size_t(r * c.cols + k)]));
      const float scale = q->scales[size_t(r * groups + g)];
      EXPECT_EQ(scale, amax / float(levels));
      for (int64_t k = g * c.group; k < std::min(c.cols, (g + 1) * c.group); ++k) {
        const float v = x[size_t(r * c.cols + k)];
        ASSERT_LE(std::fabs(back[size_t(r * c.cols + k)] - v), scale / 2 + std::fabs(v) * 0x1p-20)
            << r << "," << k;
        ASSERT_LE(std::fabs(back[size_t(r * c.cols + k)]), amax * (1 + 0x1p-20));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, IntGroup,
                         ::testing::Values(GroupCase{WeightFormat::kInt8, 16, 256, 128},
                                           GroupCase{WeightFormat::kInt8, 5, 100, 32},
                                           GroupCase{WeightFormat::kInt4, 16, 256, 128},
                                           GroupCase{WeightFormat::kInt4, 7, 77, 32},
                                           GroupCase{WeightFormat::kInt4, 3, 64, 128}),
                         [](const auto& info) {
                           return std::string(to_string(info.param.format)) + "_" +
                                  std::to_string(info.param.rows) + "x" +
                                  std::to_string(info.param.cols) + "_g" +
                                  std::to_string(info.param.group);
                         });

TEST(IntGroupQuantize, ExtremesMapToTheLargestLevelExactly) {
  const float x[4] = {-0.5f, 0.25f, 0.5f, 0.0f};
  auto q8 = quantize(WeightFormat::kInt8, "w", x, 1, 4, {.group_size = 4});
  auto q4 = quantize(WeightFormat::kInt4, "w", x, 1, 4, {.group_size = 4});
  ASSERT_TRUE(q8.is_ok() && q4.is_ok());
  EXPECT_EQ(int8_t(q8->packed[0]), -127);
  EXPECT_EQ(int8_t(q8->packed[2]), 127);
  EXPECT_EQ(q4->packed[0] & 15, 16 - 7);  // -7
  EXPECT_EQ(q4->packed[1] & 15, 7);
  float back[4];
  ASSERT_TRUE(dequantize(*q8, back).is_ok());
  EXPECT_FLOAT_EQ(back[0], -0.5f);
  EXPECT_EQ(back[3], 0.0f);
}

}  // namespace
}  // namespace cohort::models::quant
