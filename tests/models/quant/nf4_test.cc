// NF4: the 16 levels are QLoRA's normal quantiles; the dynamic map is
// bitsandbytes' create_dynamic_map; quantizing random blocks gives the codes,
// nibble order and double-quantized absmax the definition gives, computed
// here independently; dequantization is level * dequantized absmax; and the
// round trip stays within half the widest level gap plus the absmax error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "models/quant/nf4.h"
#include "models/quant/quantized_weight.h"
#include "tests/models/quant/quant_test_data.h"

namespace cohort::models::quant {
namespace {

// Phi^-1 by bisection on the normal CDF, in double.
double normal_quantile(double p) {
  double lo = -10, hi = 10;
  for (int i = 0; i < 200; ++i) {
    const double mid = (lo + hi) / 2;
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

// bitsandbytes' create_normal_map(offset=0.9677083, use_extra_value=True):
// 8 positive quantiles, 7 negative, and 0, divided by the largest.
TEST(Nf4, LevelsAreTheNormalQuantilesOfTheDefinition) {
  const double offset = 0.9677083;
  std::vector<double> levels = {0.0};
  for (int i = 0; i < 8; ++i) levels.push_back(normal_quantile(offset + (0.5 - offset) * i / 8));
  for (int i = 0; i < 7; ++i) levels.push_back(-normal_quantile(offset + (0.5 - offset) * i / 7));
  const double largest = *std::max_element(levels.begin(), levels.end());
  for (double& v : levels) v /= largest;
  std::sort(levels.begin(), levels.end());
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(kNf4Levels[i], levels[size_t(i)], 1e-6) << "level " << i;
  EXPECT_EQ(kNf4Levels[7], 0.0f);
  EXPECT_EQ(kNf4Levels[0], -1.0f);
  EXPECT_EQ(kNf4Levels[15], 1.0f);
}

TEST(Nf4, DynamicMapHasSevenDecadesOfMidpointsAroundZeroAndOne) {
  const auto& map = dynamic_map();
  EXPECT_TRUE(std::is_sorted(map.begin(), map.end()));
  EXPECT_EQ(map[127], 0.0f);
  EXPECT_EQ(map[255], 1.0f);
  EXPECT_FLOAT_EQ(map[128], 0.55e-6f);     // 10^-6 x midpoint of linspace(0.1, 1, 2)
  EXPECT_FLOAT_EQ(map[254], 0.99296875f);  // (0.9859375 + 1) / 2, the last decade's top
  EXPECT_FLOAT_EQ(map[0], -0.99296875f);
  // Decade 10^(i-6) holds 2^i values of each sign.
  for (int i = 0; i < 7; ++i) {
    const double lo = 0.1 * std::pow(10.0, i - 6), hi = std::pow(10.0, i - 6);
    const auto in_decade = [&](float v) { return v > lo * 0.999 && v < hi * 0.999; };
    EXPECT_EQ(std::count_if(map.begin(), map.end(), in_decade), 1 << i) << "decade " << i;
    EXPECT_EQ(std::count_if(map.begin(), map.end(), [&](float v) { return in_decade(-v); }),
              1 << i);
  }
}

int argmin_of(const float* table, int size, float x) {
  int best = 0;
  for (int i = 1; i < size; ++i)
    if (std::fabs(x - table[i]) < std::fabs(x - table[best])) best = i;
  return best;
}

// Values at each midpoint between two levels and one step of float either
// side, in blocks whose absmax is 1: the level is still the first nearest
// one (the quantizer counts midpoints, then settles a rounding at one).
TEST(Nf4, ValuesAtAndBesideTheMidpointsTakeTheFirstNearestLevel) {
  std::vector<float> x;
  for (int i = 0; i + 1 < 16; ++i) {
    const float mid = (kNf4Levels[i] + kNf4Levels[i + 1]) / 2;
    for (float v : {std::nextafter(mid, -2.0f), mid, std::nextafter(mid, 2.0f)}) x.push_back(v);
  }
  x.push_back(0.0f);
  while (x.size() % 63 != 0) x.push_back(0.5f);
  std::vector<float> w;
  for (size_t i = 0; i < x.size(); i += 63) {  // 63 values and a 1 a block
    w.insert(w.end(), x.begin() + long(i), x.begin() + long(i) + 63);
    w.push_back(1.0f);
  }
  const int64_t cols = 64, rows = int64_t(w.size()) / cols;
  auto q = quantize(WeightFormat::kNf4, "w", w.data(), rows, cols);
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  for (size_t e = 0; e < w.size(); ++e) {
    const uint8_t byte = q->packed[e / 2];
    ASSERT_EQ(e % 2 == 0 ? byte >> 4 : byte & 15, argmin_of(kNf4Levels, 16, w[e])) << "value " << w[e];
  }
}

TEST(Nf4, QuantizedCodesAndDoubleQuantizedAbsmaxFollowTheDefinition) {
  const int64_t rows = 128, cols = 192, n = rows * cols,
                blocks = n / 64;  // 384 blocks: two absmax blocks
  std::vector<float> x = testing::random_weights(size_t(n), 21);
  for (int64_t b = 0; b < blocks; b += 7) x[size_t(b * 64 + 3)] *= 8.0f;  // uneven block scales
  auto q =
      quantize(WeightFormat::kNf4, "model.layers.0.mlp.gate_proj.weight", x.data(), rows, cols);
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  ASSERT_EQ(q->nf4_absmax.codes.size(), size_t(blocks));
  ASSERT_EQ(q->nf4_absmax.scales.size(), 2u);

  std::vector<float> absmax(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) {
    float a = 0;
    for (int64_t e = b * 64; e < b * 64 + 64; ++e) a = std::max(a, std::fabs(x[size_t(e)]));
    absmax[size_t(b)] = a;
    for (int64_t e = b * 64; e < b * 64 + 64; ++e) {
      const int want = argmin_of(kNf4Levels, 16, x[size_t(e)] / a);
      const uint8_t byte = q->packed[size_t(e / 2)];
      ASSERT_EQ(e % 2 == 0 ? byte >> 4 : byte & 15, want) << "element " << e;
    }
  }
  const double mean = std::accumulate(absmax.begin(), absmax.end(), 0.0) / double(blocks);
  EXPECT_EQ(q->nf4_absmax.offset, float(mean));
  const float offset = float(mean);
  for (int64_t s = 0; s < 2; ++s) {
    const int64_t b0 = s * 256, b1 = std::min(blocks, b0 + 256);
    float a2 = 0;
    for (int64_t b = b0; b < b1; ++b) a2 = std::max(a2, std::fabs(absmax[size_t(b)] - offset));
    EXPECT_EQ(q->nf4_absmax.scales[size_t(s)], a2);
    for (int64_t b = b0; b < b1; ++b)
      ASSERT_EQ(q->nf4_absmax.codes[size_t(b)],
                argmin_of(dynamic_map().data(), 256, (absmax[size_t(b)] - offset) / a2));
  }

  // Dequantization: level * (map[code] * block scale + offset).
  std::vector<float> back(static_cast<size_t>(n));
  ASSERT_TRUE(dequantize(*q, back.data()).is_ok());
  double widest_gap = 0;  // -1 to -0.696: the negative side has one level fewer
  for (int i = 0; i + 1 < 16; ++i)
    widest_gap = std::max(widest_gap, double(kNf4Levels[i + 1] - kNf4Levels[i]));
  for (int64_t e = 0; e < n; ++e) {
    const int64_t b = e / 64;
    const float a_hat =
        dynamic_map()[q->nf4_absmax.codes[size_t(b)]] * q->nf4_absmax.scales[size_t(b / 256)] +
        offset;
    const int code = e % 2 == 0 ? q->packed[size_t(e / 2)] >> 4 : q->packed[size_t(e / 2)] & 15;
    ASSERT_EQ(back[size_t(e)], kNf4Levels[code] * a_hat);
    // Bound: half the widest level gap of the true absmax, plus the
    // double quantization's absmax error (|level| <= 1).
    const double bound =
        absmax[size_t(b)] * widest_gap / 2 + std::fabs(a_hat - absmax[size_t(b)]) + 1e-7;
    ASSERT_LE(std::fabs(back[size_t(e)] - x[size_t(e)]), bound) << "element " << e;
  }
}

TEST(Nf4, APartialLastBlockAndAnOddCountArePacked) {
  std::vector<float> x = testing::random_weights(3 * 25, 22);  // 75 values: blocks of 64 and 11
  auto q = quantize(WeightFormat::kNf4, "w", x.data(), 3, 25);
  ASSERT_TRUE(q.is_ok());
  EXPECT_EQ(q->packed.size(), 38u);
  EXPECT_EQ(q->nf4_absmax.codes.size(), 2u);
  std::vector<float> back(x.size()), rows(25);
  ASSERT_TRUE(dequantize(*q, back.data()).is_ok());
  ASSERT_TRUE(dequantize_rows(*q, 2, 3, rows.data()).is_ok());
  for (int i = 0; i < 25; ++i) EXPECT_EQ(rows[size_t(i)], back[size_t(50 + i)]);
}

// Blocks of an odd size share bytes with their neighbours (a block may
// start on a byte's low half): each code is still its own block's nearest
// level, and blocks longer than the quantizer's 64-value chunks too.
TEST(Nf4, OddAndLongBlocksPackEachCodeInItsPlace) {
  for (int64_t block : {7, 129}) {
    const int64_t rows = 6, cols = 45, n = rows * cols;
    std::vector<float> x = testing::random_weights(size_t(n), 23);
    QuantizeOptions options;
    options.nf4_block = block;
    auto q = quantize(WeightFormat::kNf4, "w", x.data(), rows, cols, options);
    ASSERT_TRUE(q.is_ok()) << q.status().to_string();
    for (int64_t b = 0; b * block < n; ++b) {
      const int64_t e0 = b * block, e1 = std::min(n, e0 + block);
      float a = 0;
      for (int64_t e = e0; e < e1; ++e) a = std::max(a, std::fabs(x[size_t(e)]));
      for (int64_t e = e0; e < e1; ++e) {
        const uint8_t byte = q->packed[size_t(e / 2)];
        ASSERT_EQ(e % 2 == 0 ? byte >> 4 : byte & 15, argmin_of(kNf4Levels, 16, x[size_t(e)] / a))
            << "block " << block << ", element " << e;
      }
    }
  }
}

// Large weights quantize on several threads (blocks, tile rows): the
// codes and scales equal those of quantizing a slab of their first rows
// alone, which stays on one thread.
TEST(QuantizeInParallel, LargeWeightsGiveTheCodesOfTheirSlabs) {
  const int64_t cols = 2048, rows = 1024, slab = 128;
  const std::vector<float> x = testing::random_weights(size_t(rows * cols), 77);
  auto whole = quantize(WeightFormat::kNf4, "w", x.data(), rows, cols);
  auto part = quantize(WeightFormat::kNf4, "w", x.data(), slab, cols);
  ASSERT_TRUE(whole.is_ok() && part.is_ok());
  EXPECT_TRUE(std::equal(part->packed.begin(), part->packed.end(), whole->packed.begin()));
  auto fp8 = quantize(WeightFormat::kFp8Block, "w", x.data(), rows, cols);
  auto fp8_part = quantize(WeightFormat::kFp8Block, "w", x.data(), slab, cols);
  ASSERT_TRUE(fp8.is_ok() && fp8_part.is_ok());
  EXPECT_TRUE(std::equal(fp8_part->packed.begin(), fp8_part->packed.end(), fp8->packed.begin()));
  EXPECT_TRUE(std::equal(fp8_part->scales.begin(), fp8_part->scales.end(), fp8->scales.begin()));
  // And the same again: nothing depends on the threads' timing.
  auto again = quantize(WeightFormat::kNf4, "w", x.data(), rows, cols);
  EXPECT_EQ(again->packed, whole->packed);
  EXPECT_EQ(again->nf4_absmax.codes, whole->nf4_absmax.codes);
}

}  // namespace
}  // namespace cohort::models::quant
