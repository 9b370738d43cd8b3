// e4m3 <-> float by scaling with powers of two, which is exact in float, and
// rounding once with nearbyint (the default rounding mode: nearest, ties to
// even), so the one rounding is the format's own.
#include "models/quant/fp8_e4m3.h"

#include <cmath>
#include <limits>

namespace cohort::models::quant {

float e4m3_to_float(uint8_t bits) {
  const bool negative = bits & 0x80;
  const int exponent = (bits >> 3) & 0xf;
  const int mantissa = bits & 0x7;
  float magnitude;
  if (exponent == 0xf && mantissa == 0x7) {
    magnitude = std::numeric_limits<float>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -9);
  } else {
    magnitude = std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
  }
  return negative ? -magnitude : magnitude;
}

uint8_t float_to_e4m3(float value) {
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  if (std::isnan(value)) return sign | 0x7f;
  const float magnitude = std::fabs(value);
  if (magnitude >= kE4m3Max) return sign | kE4m3MaxBits;
  if (magnitude < 0x1p-6f) {
    // Subnormal: multiples of 2^-9. Rounding up to 8 * 2^-9 = 2^-6 lands on
    // the smallest normal, whose bits (exponent 1, mantissa 0) are 8.
    const int steps = static_cast<int>(std::nearbyint(magnitude * 512.0f));
    return sign | static_cast<uint8_t>(steps);
  }
  int exponent;  // magnitude = fraction * 2^exponent, fraction in [0.5, 1)
  std::frexp(magnitude, &exponent);
  exponent -= 1;  // now magnitude in [2^exponent, 2^(exponent+1)), exponent in [-6, 8]
  int scaled = static_cast<int>(std::nearbyint(std::ldexp(magnitude, 3 - exponent)));  // [8, 16]
  if (scaled == 16) {
    scaled = 8;
    exponent += 1;
  }
  // magnitude < 448 keeps this at or below S.1111.110.
  return sign | static_cast<uint8_t>(((exponent + 7) << 3) | (scaled - 8));
}

}  // namespace cohort::models::quant
