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

}  // namespace cohort
