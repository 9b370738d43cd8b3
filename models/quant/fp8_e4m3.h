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
#pragma once

#include <cstdint>

namespace cohort::models::quant {

inline constexpr float kE4m3Max = 448.0f;
inline constexpr uint8_t kE4m3MaxBits = 0x7e;  // +448

float e4m3_to_float(uint8_t bits);
uint8_t float_to_e4m3(float value);
inline bool e4m3_is_nan(uint8_t bits) {
  return (bits & 0x7f) == 0x7f;
}

}  // namespace cohort::models::quant
