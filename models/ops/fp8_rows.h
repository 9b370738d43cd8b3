// Activations as e4m3 for Hopper's FP8 tensor cores: the input side of the
// engine's FP8 projections (W8A8: e4m3 weights with one scale per 128 x 128
// block, as FP8 checkpoints ship them, times e4m3 activations with one
// scale per row and 128 columns, as DeepSeek-V3 and transformers'
// fine-grained FP8 compute them), multiplied by cuBLASLt
// (models/decode/cuda_tuned_gemm.h).
//
// Each (row, 128-column block) of x gets a power-of-two scale s, the least
// with amax / s <= 448 (fp8_rows_scale), so x / s is exact and its code
// float_to_e4m3(x / s) (models/quant/fp8_e4m3.h) is the same on the host
// and the GPU. A power of two loses nothing against amax / 448: e4m3 keeps
// three mantissa bits in every binade, and the block's largest value still
// lands in (224, 448].
//
// Layouts: codes [n_pad, cols] row-major; scales block-major
// [cols / 128, n_pad] (each block's column of row scales contiguous), what
// cuBLASLt's VEC128_32F mode reads for its B operand. Rows [n, n_pad) get
// zero codes and scale 1: cuBLASLt is given n_pad rows (a multiple of 4, so
// each block's scales start 16-byte aligned), and those rows add nothing.
#pragma once

#include <cmath>
#include <cstdint>

#include "models/ops/decode_rows.h"

namespace cohort::models {

inline constexpr int kFp8RowBlock = 128;

// Rows cuBLASLt is given for n rows of x.
inline int fp8_rows_padded(int n) { return (n + 3) & ~3; }

// The least power of two s with amax / s <= 448; 1 where amax is 0 or not
// finite (a NaN or infinite block keeps its NaN codes, as bf16 would).
COHORT_HOST_DEVICE inline float fp8_rows_scale(float amax) {
  if (!(amax > 0.0f) || !(amax <= 3.0e38f)) return 1.0f;
  int e = 0;
  (void)frexpf(amax / 448.0f, &e);  // amax / 448 in [2^(e-1), 2^e)
  float s = ldexpf(1.0f, e);
  // frexp's bracket comes from a rounded quotient: settle it exactly.
  if (amax > 448.0f * s) s *= 2.0f;
  if (amax <= 224.0f * s) s *= 0.5f;
  return s;
}

namespace cpu {

// The reference: codes and scales as above. cols a multiple of 128.
void quantize_rows_e4m3(uint8_t* codes, float* scales, const Bf16Bits* x, int n, int n_pad, int cols);

}  // namespace cpu

namespace cuda {

void quantize_rows_e4m3(uint8_t* codes, float* scales, const Bf16Bits* x, int n, int n_pad, int cols,
                        CUstream_st* stream);

// swiglu_bf16 (swiglu.h) of gate_up [n, 2I] fp32 into h [n, I] bf16 and,
// from the same bf16 values, the codes and scales quantize_rows_e4m3 gives
// for h: the FP8 down projection's input in the SwiGLU's pass. I a multiple
// of 128.
void swiglu_rows_e4m3(Bf16Bits* h, uint8_t* codes, float* scales, const float* gate_up, int n, int n_pad, int I,
                      CUstream_st* stream);

}  // namespace cuda
}  // namespace cohort::models
