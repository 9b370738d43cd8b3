// RMSNorm, forward and backward (CPU fp32 reference; CUDA in rmsnorm.cuh).
//
//   out = x * rstd * w,   rstd = 1 / sqrt(mean(x^2) + eps)
// over the last dimension `dim` of `n` rows, as HF's LlamaRMSNorm / Qwen3RMSNorm
// compute it in fp32. The same op is the per-head QK norm of Qwen3: rows are
// then (token, head) pairs and dim is head_dim. Forward saves rstd [n] for
// backward; backward accumulates (+=) into dx and dw (a null dw is a frozen
// weight).
//
// The bf16 decode engine fuses the residual add in front of the norm and
// writes the result in bf16 (the next GEMM's input): add_rmsnorm_bf16. Its
// reference is residual_forward (swiglu.h) then rmsnorm_forward.
#pragma once

#include "models/ops/decode_rows.h"

namespace cohort::models::cpu {

void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int n, int dim,
                     float eps);
void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                      const float* rstd, int n, int dim);

}  // namespace cohort::models::cpu

// CUDA launcher (rmsnorm.cuh): device pointers, on `stream`, no allocation.
namespace cohort::models::cuda {

// If delta: x += delta (x [n, hidden] fp32, updated in place). Then
// out [n, hidden] = rmsnorm(x) * w in bf16. One block per row.
void add_rmsnorm_bf16(float* x, const float* delta, const float* w, Bf16Bits* out, int n,
                      int hidden, float eps, CUstream_st* stream);

// add_rmsnorm_bf16 that also codes out as quantize_rows_e4m3 (fp8_rows.h)
// would: codes [n_pad, hidden], scales [hidden / 128, n_pad], rows
// [n, n_pad) zero codes and scale 1. An FP8 projection's input in the
// norm's pass; where add_rmsnorm_e4m3_supported (hidden a multiple of 128,
// the widths add_rmsnorm_bf16 keeps in registers).
bool add_rmsnorm_e4m3_supported(int hidden);
void add_rmsnorm_e4m3(float* x, const float* delta, const float* w, Bf16Bits* out, uint8_t* codes, float* scales,
                      int n, int n_pad, int hidden, float eps, CUstream_st* stream);

// The start of a folded-norm chain (FoldedNorm, gemv.h): out [n, hidden] =
// bf16(x * w), and sumsq [n, hidden / chunk] the sums of squares of each
// row's chunks of `chunk` columns (64, the tile forms' chains, or 16, the
// quantized GEMV's). hidden a multiple of chunk.
void rms_chunks_bf16(const float* x, const float* w, Bf16Bits* out, float* sumsq, int n,
                     int hidden, CUstream_st* stream, int chunk = 64);

}  // namespace cohort::models::cuda
