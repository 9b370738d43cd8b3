// CUDA form of fp8_rows.h: one warp per (row, 128-column block), four
// values a lane, the block's largest magnitude by shuffles, its
// power-of-two scale, and four codes a lane written as one word; the same
// after a SwiGLU for the down projection's input.
#pragma once

#include <cuda_fp8.h>

#include "models/cuda/common.cuh"
#include "models/ops/fp8_rows.h"

namespace cohort::models::cuda {

// One warp's (row, block): four bf16 values a lane (two packed pairs) to
// codes and, from lane 0, the block's scale.
__device__ inline void e4m3_block(uint8_t* codes, float* scale_out, uint32_t lo_pair, uint32_t hi_pair) {
  const float v0 = __uint_as_float(lo_pair << 16), v1 = __uint_as_float(lo_pair & 0xffff0000u);
  const float v2 = __uint_as_float(hi_pair << 16), v3 = __uint_as_float(hi_pair & 0xffff0000u);
  float amax = fmaxf(fmaxf(fabsf(v0), fabsf(v1)), fmaxf(fabsf(v2), fabsf(v3)));
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  const float s = fp8_rows_scale(amax);
  const float inv = 1.0f / s;  // a power of two: x * inv is x / s exactly
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(v0 * inv, v1 * inv), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(v2 * inv, v3 * inv), __NV_SATFINITE, __NV_E4M3);
  *reinterpret_cast<uint32_t*>(codes) = lo | (hi << 16);
  if ((threadIdx.x & 31) == 0) *scale_out = s;
}

// The warp's (row r, block b) of n_pad rows and `blocks` blocks a row; false
// past the last, and for padding rows after writing their zeros.
__device__ inline bool e4m3_warp_block(uint8_t* codes, float* scales, int n, int n_pad, int cols, int& r, int& b) {
  const int blocks = cols / kFp8RowBlock;
  const int warp = static_cast<int>((blockIdx.x * size_t(blockDim.x) + threadIdx.x) >> 5), lane = threadIdx.x & 31;
  if (warp >= n_pad * blocks) return false;
  r = warp / blocks, b = warp % blocks;
  if (r < n) return true;
  *reinterpret_cast<uint32_t*>(codes + static_cast<size_t>(r) * cols + size_t(b) * kFp8RowBlock + lane * 4) = 0;
  if (lane == 0) scales[static_cast<size_t>(b) * n_pad + r] = 1.0f;
  return false;
}

__global__ void quantize_rows_e4m3_kernel(uint8_t* codes, float* scales, const Bf16Bits* x, int n, int n_pad,
                                          int cols) {
  begin_dependent();  // x is the predecessor's output; codes and scales its input
  int r = 0, b = 0;
  if (!e4m3_warp_block(codes, scales, n, n_pad, cols, r, b)) return;
  const size_t at = static_cast<size_t>(r) * cols + size_t(b) * kFp8RowBlock + (threadIdx.x & 31) * 4;
  const uint2 raw = *reinterpret_cast<const uint2*>(x + at);
  e4m3_block(codes + at, scales + static_cast<size_t>(b) * n_pad + r, raw.x, raw.y);
}

// swiglu_bf16_x4_kernel's arithmetic (swiglu.cuh), then e4m3_block.
__global__ void swiglu_rows_e4m3_kernel(Bf16Bits* h, uint8_t* codes, float* scales, const float* gate_up, int n,
                                        int n_pad, int I) {
  begin_dependent();
  int r = 0, b = 0;
  if (!e4m3_warp_block(codes, scales, n, n_pad, I, r, b)) return;
  const size_t i = size_t(b) * kFp8RowBlock + (threadIdx.x & 31) * 4, at = static_cast<size_t>(r) * I + i;
  const float4 g = *reinterpret_cast<const float4*>(gate_up + static_cast<size_t>(r) * 2 * I + i);
  const float4 u = *reinterpret_cast<const float4*>(gate_up + static_cast<size_t>(r) * 2 * I + I + i);
  const float a = g.x / (1.0f + __expf(-g.x)) * u.x, c = g.y / (1.0f + __expf(-g.y)) * u.y;
  const float d = g.z / (1.0f + __expf(-g.z)) * u.z, e = g.w / (1.0f + __expf(-g.w)) * u.w;
  const uint2 packed = make_uint2(pack_bf16x2(a, c), pack_bf16x2(d, e));
  *reinterpret_cast<uint2*>(h + at) = packed;
  e4m3_block(codes + at, scales + static_cast<size_t>(b) * n_pad + r, packed.x, packed.y);
}

void quantize_rows_e4m3(uint8_t* codes, float* scales, const Bf16Bits* x, int n, int n_pad, int cols,
                        CUstream_st* stream) {
  const size_t threads = static_cast<size_t>(n_pad) * (cols / kFp8RowBlock) * 32;
  // Not grid_for: a prefill's rows need more blocks than its clamp.
  const unsigned grid = static_cast<unsigned>((threads + kThreads - 1) / kThreads);
  launch_dependent(quantize_rows_e4m3_kernel, grid, kThreads, 0, stream, codes, scales, x, n, n_pad, cols);
}

void swiglu_rows_e4m3(Bf16Bits* h, uint8_t* codes, float* scales, const float* gate_up, int n, int n_pad, int I,
                      CUstream_st* stream) {
  const size_t threads = static_cast<size_t>(n_pad) * (I / kFp8RowBlock) * 32;
  const unsigned grid = static_cast<unsigned>((threads + kThreads - 1) / kThreads);
  launch_dependent(swiglu_rows_e4m3_kernel, grid, kThreads, 0, stream, h, codes, scales, gate_up, n, n_pad, I);
}

}  // namespace cohort::models::cuda
