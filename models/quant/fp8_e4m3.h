// FP8 e4m3 ("e4m3fn", torch.float8_e4m3fn, CUDA's __nv_fp8_e4m3): the
// element type of every FP8 weight cohort reads or writes.
//
//   bit 7 sign | bits 6..3 exponent, bias 7 | bits 2..0 mantissa
//   exponent 1..15: (1 + m/8) * 2^(e-7); exponent 0: m/8 * 2^-6 (subnormal)
//   S.1111.111 is NaN (0x7f, 0xff); there are no infinities; the largest
//   finite magnitude is S.1111.110 = 448, the smallest subnormal 2^-9.
//
// float -> e4m3 rounds to nearest, ties to even, and saturates: finite
// values beyond the range and the infinities become +-448 (what transformers'
// FineGrainedFP8 quantizer gets by clamping to +-448 before the cast, and
// CUDA's __NV_SATFINITE conversion does). NaN stays NaN, sign kept. Both
// directions are exact functions of their input; tests/models/quant checks
// all 256 patterns.
//
// Both are inline on the bits: a quantizer converts a 70B layer's 10^9
// values, and a call a value was most of that time.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace cohort::models::quant {

inline constexpr float kE4m3Max = 448.0f;
inline constexpr uint8_t kE4m3MaxBits = 0x7e;  // +448

inline bool e4m3_is_nan(uint8_t bits) {
  return (bits & 0x7f) == 0x7f;
}

// Normal codes are a float's bits with the exponent rebased from 7 to 127;
// subnormal ones m * 2^-9, exact in float; the sign is the top bit.
inline float e4m3_to_float(uint8_t bits) {
  const uint32_t exponent = (bits >> 3) & 0xfu, mantissa = bits & 0x7u;
  uint32_t wide;
  if (e4m3_is_nan(bits)) {
    wide = 0x7fc00000u;  // quiet NaN
  } else if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 0.001953125f;
    std::memcpy(&wide, &magnitude, sizeof(wide));
  } else {
    wide = ((exponent + 120u) << 23) | (mantissa << 20);
  }
  wide |= static_cast<uint32_t>(bits & 0x80u) << 24;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}

inline uint8_t float_to_e4m3(float value) {
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
  // Normal: the mantissa rounded from 23 bits to 3, to nearest and ties to
  // even, by adding just under half of the dropped part's unit plus the
  // kept part's lowest bit (no branch: a random weight's roundings go
  // either way, and a mispredicted one cost more than the rest); a carry
  // out of the mantissa steps the exponent, as the format's bits do, and
  // magnitudes below 448 stay at or below S.1111.110. Then the exponent
  // rebased from float's bias of 127 to 7.
  const uint32_t rounded = magnitude_bits + 0x7ffffu + ((magnitude_bits >> 20) & 1u);
  return sign | static_cast<uint8_t>((rounded >> 20) - (120u << 3));
}

}  // namespace cohort::models::quant
