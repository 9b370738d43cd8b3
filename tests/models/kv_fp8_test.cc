// The fp8 KV cache's number format on the host (models/ops/kv_fp8.h): the
// scales are the least powers of two that leave 2x headroom, a value comes
// back within e4m3's step for its scale, and what exceeds the range
// saturates. The kernels' side: kv_fp8_parity_test.cc (GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "models/ops/kv_fp8.h"

namespace cohort::models {
namespace {

TEST(KvFp8, ScalesAreTheLeastPowersOfTwoLeavingTwiceTheLargestValue) {
  for (float amax : {1e-6f, 1e-3f, 0.3f, 1.0f, 7.5f, 112.0f, 224.0f, 224.5f, 448.0f, 1000.0f, 3e5f}) {
    SCOPED_TRACE(amax);
    const float s = kv_fp8_scale(amax);
    int exponent = 0;
    EXPECT_EQ(std::frexp(s, &exponent), 0.5f) << "a power of two";
    EXPECT_LE(amax * kKvFp8Headroom / s, 448.0f);
    EXPECT_GT(amax * kKvFp8Headroom / (s / 2), 448.0f) << "the least such";
  }
  // Nothing measured, or nothing sensible: scale 1.
  for (float amax : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(kv_fp8_scale(amax), 1.0f);
  }
}

TEST(KvFp8, ValuesComeBackWithinTheStepOfTheirScale) {
  std::mt19937 rng(3);
  for (float amax : {0.02f, 1.0f, 37.0f, 900.0f}) {
    SCOPED_TRACE(amax);
    const float s = kv_fp8_scale(amax);
    std::uniform_real_distribution<float> dist(-amax, amax);
    std::vector<float> values(4096);
    for (float& v : values) v = dist(rng);
    values[0] = amax, values[1] = -amax, values[2] = 0.0f;
    std::vector<uint8_t> codes(values.size());
    std::vector<float> back(values.size());
    kv_fp8_encode(values.data(), values.size(), s, codes.data());
    kv_fp8_decode(codes.data(), codes.size(), s, back.data());
    for (size_t i = 0; i < values.size(); ++i) {
      const float x = values[i], err = std::fabs(back[i] - x);
      if (std::fabs(x) >= std::ldexp(s, -6)) {
        EXPECT_LE(err, std::fabs(x) / 16) << x;  // 3 mantissa bits, rounded to nearest
      } else {
        EXPECT_LE(err, std::ldexp(s, -10)) << x;  // subnormals: half of 2^-9 of the scale
      }
    }
    EXPECT_EQ(back[2], 0.0f);
  }
}

TEST(KvFp8, BeyondTheRangeSaturatesAtTheLargestCode) {
  const float s = 0.25f, values[] = {448.0f * s * 3, -448.0f * s * 3, std::numeric_limits<float>::infinity()};
  uint8_t codes[3];
  float back[3];
  kv_fp8_encode(values, 3, s, codes);
  kv_fp8_decode(codes, 3, s, back);
  EXPECT_EQ(back[0], 448.0f * s);
  EXPECT_EQ(back[1], -448.0f * s);
  EXPECT_EQ(back[2], 448.0f * s);
}

TEST(KvFp8, TheDtypeNamesAreBf16AndFp8) {
  EXPECT_EQ(*parse_kv_dtype("bf16"), KvDtype::kBf16);
  EXPECT_EQ(*parse_kv_dtype("fp8"), KvDtype::kFp8);
  EXPECT_EQ(kv_value_bytes(KvDtype::kFp8) * 2, kv_value_bytes(KvDtype::kBf16));
  const auto wrong = parse_kv_dtype("fp16");
  ASSERT_FALSE(wrong.is_ok());
  EXPECT_NE(wrong.status().message().find("'fp16'"), std::string::npos) << wrong.status().message();
}

}  // namespace
}  // namespace cohort::models
