// CUDA form of fp8_rows.h: one warp per (row, 128-column block), four
// values a lane, the block's largest magnitude by shuffles, its
// power-of-two scale, and four codes a lane written as one word.
#pragma once

#include <cuda_fp8.h>

#include "models/cuda/common.cuh"
#include "models/ops/fp8_rows.h"

namespace cohort::models::cuda {

__global__ void quantize_rows_e4m3_kernel(uint8_t* codes, float* scales, const Bf16Bits* x, int n, int n_pad,
                                          int cols) {
  begin_dependent();  // x is the predecessor's output; codes and scales its input
  const int blocks = cols / kFp8RowBlock;
  const int warp = static_cast<int>((blockIdx.x * size_t(blockDim.x) + threadIdx.x) >> 5), lane = threadIdx.x & 31;
  if (warp >= n_pad * blocks) return;
  const int r = warp / blocks, b = warp % blocks;
  const size_t at = static_cast<size_t>(r) * cols + size_t(b) * kFp8RowBlock + lane * 4;
  float* scale_out = scales + static_cast<size_t>(b) * n_pad + r;
  if (r >= n) {
    *reinterpret_cast<uint32_t*>(codes + at) = 0;
    if (lane == 0) *scale_out = 1.0f;
    return;
  }
  const uint2 raw = *reinterpret_cast<const uint2*>(x + at);
  const float v0 = __uint_as_float(raw.x << 16), v1 = __uint_as_float(raw.x & 0xffff0000u);
  const float v2 = __uint_as_float(raw.y << 16), v3 = __uint_as_float(raw.y & 0xffff0000u);
  float amax = fmaxf(fmaxf(fabsf(v0), fabsf(v1)), fmaxf(fabsf(v2), fabsf(v3)));
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  const float s = fp8_rows_scale(amax);
  const float inv = 1.0f / s;  // a power of two: x * inv is x / s exactly
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(v0 * inv, v1 * inv), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(v2 * inv, v3 * inv), __NV_SATFINITE, __NV_E4M3);
  *reinterpret_cast<uint32_t*>(codes + at) = lo | (hi << 16);
  if (lane == 0) *scale_out = s;
}

void quantize_rows_e4m3(uint8_t* codes, float* scales, const Bf16Bits* x, int n, int n_pad, int cols,
                        CUstream_st* stream) {
  const size_t threads = static_cast<size_t>(n_pad) * (cols / kFp8RowBlock) * 32;
  // Not grid_for: a prefill's rows need more blocks than its clamp.
  const unsigned grid = static_cast<unsigned>((threads + kThreads - 1) / kThreads);
  launch_dependent(quantize_rows_e4m3_kernel, grid, kThreads, 0, stream, codes, scales, x, n, n_pad, cols);
}

}  // namespace cohort::models::cuda
