// e4m3 conversion, exhaustively: every one of the 256 bit patterns decodes to
// its field definition and encodes back to itself; every midpoint between
// neighbours rounds to the even one; overflow saturates; NaN stays NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "models/quant/fp8_e4m3.h"
#include "tests/models/quant/quant_test_data.h"

namespace cohort::models::quant {
namespace {

using testing::e4m3_reference;

TEST(E4m3, EveryBitPatternDecodesToItsFieldDefinition) {
  int nans = 0;
  for (int b = 0; b < 256; ++b) {
    const double want = e4m3_reference(uint8_t(b));
    const float got = e4m3_to_float(uint8_t(b));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "bits 0x" << std::hex << b;
      EXPECT_TRUE(e4m3_is_nan(uint8_t(b)));
      ++nans;
      continue;
    }
    EXPECT_EQ(double(got), want) << "bits 0x" << std::hex << b;
    EXPECT_EQ(std::signbit(got), bool(b & 0x80)) << "bits 0x" << std::hex << b;
  }
  EXPECT_EQ(nans, 2);  // 0x7f and 0xff
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
}

TEST(E4m3, EveryFinitePatternEncodesBackToItself) {
  for (int b = 0; b < 256; ++b) {
    if (e4m3_is_nan(uint8_t(b))) continue;
    EXPECT_EQ(int(float_to_e4m3(e4m3_to_float(uint8_t(b)))), b) << "bits 0x" << std::hex << b;
  }
}

TEST(E4m3, MidpointsRoundToTheEvenNeighbourAndOthersToTheNearest) {
  // Non-negative finite values in order: patterns 0x00 .. 0x7e are ascending.
  for (int b = 0; b < 0x7e; ++b) {
    const float lo = float(e4m3_reference(uint8_t(b))), hi = float(e4m3_reference(uint8_t(b + 1)));
    const float mid = (lo + hi) / 2;  // exact: both have few mantissa bits
    const int even = (b % 2 == 0) ? b : b + 1;
    EXPECT_EQ(int(float_to_e4m3(mid)), even) << "between 0x" << std::hex << b << " and 0x" << b + 1;
    EXPECT_EQ(int(float_to_e4m3(-mid)), even | 0x80);
    EXPECT_EQ(int(float_to_e4m3(std::nextafter(mid, 0.0f))), b);
    EXPECT_EQ(int(float_to_e4m3(std::nextafter(mid, 1000.0f))), b + 1);
  }
}

TEST(E4m3, ValuesBeyond448SaturateAndNanStaysNan) {
  for (float big : {448.0f, 449.0f, 464.0f, 480.0f, 1e6f, std::numeric_limits<float>::max(),
                    std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(int(float_to_e4m3(big)), 0x7e) << big;
    EXPECT_EQ(int(float_to_e4m3(-big)), 0xfe) << -big;
  }
  EXPECT_TRUE(e4m3_is_nan(float_to_e4m3(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(e4m3_is_nan(float_to_e4m3(-std::numeric_limits<float>::quiet_NaN())));
  // Below half the smallest subnormal: zero of the same sign.
  EXPECT_EQ(int(float_to_e4m3(std::ldexp(1.0f, -11))), 0x00);
  EXPECT_EQ(int(float_to_e4m3(-std::ldexp(1.0f, -11))), 0x80);
  EXPECT_EQ(int(float_to_e4m3(-0.0f)), 0x80);
}

TEST(E4m3, RandomFloatsRoundToTheNearestRepresentable) {
  std::vector<double> finite;
  for (int b = 0; b <= 0x7e; ++b) finite.push_back(e4m3_reference(uint8_t(b)));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-12.0f, 9.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = std::exp2(exponent(rng));
    const double got = e4m3_reference(float_to_e4m3(x));
    double best = 1e30;
    for (double v : finite) best = std::min(best, std::fabs(v - x));
    if (x >= 448.0f) best = std::fabs(448.0 - x);  // saturation
    EXPECT_EQ(std::fabs(got - x), best) << x;
  }
}

// The conversion rounds on the float's bits; here it is held to the
// arithmetic definition (frexp, ldexp and one nearbyint) over every 61st
// float bit pattern (70 million: each binade, both signs, NaNs, infinities,
// subnormals) and the ties around every code.
uint8_t e4m3_by_arithmetic(float value) {
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  if (std::isnan(value)) return sign | 0x7f;
  const float magnitude = std::fabs(value);
  if (magnitude >= kE4m3Max) return sign | kE4m3MaxBits;
  if (magnitude < 0x1p-6f) return sign | static_cast<uint8_t>(static_cast<int>(std::nearbyint(magnitude * 512.0f)));
  int exponent;
  std::frexp(magnitude, &exponent);
  exponent -= 1;
  int scaled = static_cast<int>(std::nearbyint(std::ldexp(magnitude, 3 - exponent)));
  if (scaled == 16) scaled = 8, exponent += 1;
  return sign | static_cast<uint8_t>(((exponent + 7) << 3) | (scaled - 8));
}

TEST(E4m3, TheBitwiseConversionIsTheArithmeticDefinition) {
  size_t differ = 0;
  auto check = [&](float x) {
    if (float_to_e4m3(x) != e4m3_by_arithmetic(x) && ++differ <= 5) {
      ADD_FAILURE() << x << ": " << int(float_to_e4m3(x)) << " against " << int(e4m3_by_arithmetic(x));
    }
  };
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 61) {
    const uint32_t u = static_cast<uint32_t>(b);
    float x;
    std::memcpy(&x, &u, sizeof(x));
    check(x);
  }
  for (int code = 0; code < 0x7e; ++code) {  // midway between neighbouring codes, and a step either side
    const float mid = float((double(e4m3_to_float(uint8_t(code))) + e4m3_to_float(uint8_t(code + 1))) / 2);
    for (float x : {std::nextafter(mid, 0.0f), mid, std::nextafter(mid, 1e9f)}) check(x), check(-x);
  }
  EXPECT_EQ(differ, 0u);
}

}  // namespace
}  // namespace cohort::models::quant
