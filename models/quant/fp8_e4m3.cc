// e4m3 -> float by scaling with powers of two, which is exact in float;
// float -> e4m3 rounding once, to nearest and ties to even, on the float's
// bits (nearbyint for the subnormal codes), so the one rounding is the
// format's own.
#include "models/quant/fp8_e4m3.h"

#include <cmath>
#include <cstring>
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
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const uint8_t sign = (bits >> 31) != 0 ? 0x80 : 0x00;
  const uint32_t magnitude_bits = bits & 0x7fffffffu;
  if (magnitude_bits > 0x7f800000u) return sign | 0x7f;          // NaN
  if (magnitude_bits >= 0x43e00000u) return sign | kE4m3MaxBits;  // 448 and beyond, infinity
  if (magnitude_bits < 0x3c800000u) {
    // Below 2^-6, subnormal: multiples of 2^-9. Rounding up to 8 * 2^-9 =
    // 2^-6 lands on the smallest normal, whose bits (exponent 1, mantissa
    // 0) are 8.
    float magnitude;
    std::memcpy(&magnitude, &magnitude_bits, sizeof(magnitude));
    return sign | static_cast<uint8_t>(static_cast<int>(std::nearbyint(magnitude * 512.0f)));
  }
  // Normal: the exponent rebased from float's bias of 127 to 7, the
  // mantissa rounded from 23 bits to 3, to nearest and ties to even, on the
  // bits themselves (a quantizer converts 10^9 values of a 70B layer); a
  // carry out of the mantissa steps the exponent, as the format's bits do,
  // and magnitudes below 448 stay at or below S.1111.110. The same codes as
  // frexp, ldexp and nearbyint gave, for every float.
  const uint32_t mantissa = magnitude_bits & 0x7fffffu;
  uint32_t code = (((magnitude_bits >> 23) - 120) << 3) | (mantissa >> 20);
  const uint32_t rest = mantissa & 0xfffffu;
  if (rest > 0x80000u || (rest == 0x80000u && (code & 1u) != 0)) ++code;
  return sign | static_cast<uint8_t>(code);
}

}  // namespace cohort::models::quant
