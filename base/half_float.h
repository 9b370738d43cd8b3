// bf16 and f16 <-> f32 on the CPU, rounding to nearest even; NaN stays NaN.
// One definition for every library that converts half floats (safetensors
// I/O, the CPU collectives' reductions).
#pragma once

#include <cstdint>
#include <cstring>

namespace cohort {

inline float bf16_bits_to_float(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, 4);
  return value;
}

inline uint16_t float_to_bf16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(bits >> 16);
}

#ifdef __FLT16_MANT_DIG__  // the compiler has _Float16 (GCC 12+, clang 15+ on x86)

inline float f16_bits_to_float(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<float>(h);
}

inline uint16_t float_to_f16_bits(float value) {
  _Float16 h = static_cast<_Float16>(value);  // the compiler rounds to nearest even
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}

#else  // by hand, for compilers without _Float16 (clang 14 builds the fuzzers)

inline float f16_bits_to_float(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  uint32_t wide;
  if (exponent == 0x1f) {
    wide = sign | 0x7f800000u | (mantissa << 13);  // inf, NaN
  } else if (exponent != 0) {
    wide = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    wide = sign;
  } else {  // subnormal: normalise
    int shift = 0;
    while (!(mantissa & 0x400u)) {
      mantissa <<= 1;
      ++shift;
    }
    wide = sign | (static_cast<uint32_t>(113 - shift) << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float value;
  std::memcpy(&value, &wide, 4);
  return value;
}

inline uint16_t float_to_f16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x33000001u) return sign;                                    // rounds to 0
  int exponent = static_cast<int>(abs >> 23) - 112;
  uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
  int shift = exponent > 0 ? 13 : 14 - exponent;  // subnormals lose more bits
  uint32_t half = mantissa >> shift;
  uint32_t rest = mantissa & ((1u << shift) - 1);
  uint32_t halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (half & 1u))) ++half;  // nearest, ties to even
  if (exponent > 0) half = (static_cast<uint32_t>(exponent) << 10) + (half - 0x400u);
  return static_cast<uint16_t>(sign | half);
}

#endif

}  // namespace cohort
