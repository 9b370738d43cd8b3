// Shared by the models/quant tests: seeded random data and the tests' own
// readings of the formats' definitions, written from the layouts' prose (not
// by calling the library), so a test compares two independent codings.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "base/half_float.h"

namespace cohort::models::quant::testing {

inline std::vector<float> random_weights(size_t n, uint64_t seed, float scale = 0.05f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> w(n);
  for (float& x : w) x = normal(rng);
  return w;
}

// A value fp16 can hold exactly (checkpoints store GPTQ/AWQ scales in fp16).
inline float fp16_value(float x) {
  return f16_bits_to_float(float_to_f16_bits(x));
}

// e4m3 from its bit fields: sign, 4-bit exponent with bias 7, 3-bit
// mantissa, exponent 0 subnormal, S.1111.111 NaN.
inline double e4m3_reference(uint8_t bits) {
  const int sign = bits >> 7, exponent = (bits >> 3) & 15, mantissa = bits & 7;
  if (exponent == 15 && mantissa == 7) return NAN;
  const double magnitude = exponent == 0 ? mantissa / 8.0 * std::pow(2.0, -6)
                                         : (1.0 + mantissa / 8.0) * std::pow(2.0, exponent - 7);
  return sign ? -magnitude : magnitude;
}

// Appends a little-endian int32 word to a byte buffer (safetensors' I32).
inline void push_word(std::vector<uint8_t>& bytes, uint32_t word) {
  for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<uint8_t>(word >> (8 * i)));
}

}  // namespace cohort::models::quant::testing
