// CUDA tensor-core projections for decode steps of 5 to 64 rows (contract:
// gemv.h, skinny_gemm_*; CPU reference: gemv.cc).
//
// At these sizes a projection reads each weight once for a few dozen
// multiply-adds: still bound by the weight stream, but past what the GEMV's
// CUDA-core multiply-adds keep up with, while cuBLAS's tiles leave most of
// the machine idle (a 1,024-row output in 44 blocks) and add a split-K
// reduction kernel. Here the weights are the MMA's A operand (16 output rows
// a block), the rows of x its B operand (8 a tile, up to 8 tiles), so every
// weight is read once, straight from global memory into registers:
//
//  * K is permuted within each 32-element chunk. Lane (g, t) loads 16 bytes
//    of weight rows g and g + 8 and of x row 8j + g at k = 8t: its eight
//    values fill the fragments of two m16n8k16 steps, k 8t..8t+3 for the
//    first and 8t+4..8t+7 for the second. A and B use the same permutation,
//    so the products are the plain dot products, and no shared memory or
//    shuffles stand between the loads and the MMAs.
//  * The eight warps of a block split K and meet in shared memory in a
//    fixed order, so the sums are deterministic.
//  * Epilogues: store, add into y (the residual stream takes an output
//    projection in place), or SwiGLU, where a block's 16 rows are 8 gate
//    rows and their 8 up rows, so each lane holds both halves of its outputs.
#pragma once

#include <cuda_bf16.h>

#include "models/cuda/common.cuh"
#include "models/ops/gemv.h"

namespace cohort::models::cuda {

constexpr int kSkinnyWarps = 8;
enum class SkinnyEpilogue { kStore, kAccumulate, kSwiglu };

__device__ __forceinline__ uint4 load16_or_zero(const Bf16Bits* p, bool valid) {
  return valid ? __ldg(reinterpret_cast<const uint4*>(p)) : make_uint4(0, 0, 0, 0);
}

// y / h from x [n, in] and w; NT tiles of 8 rows of x (n <= 8 NT).
// kStore/kAccumulate: w [out, in], y [n, out] fp32. kSwiglu: w [2 out, in]
// (gate rows, then up rows), h [n, out] bf16.
template <int NT, SkinnyEpilogue kEpilogue>
__global__ void __launch_bounds__(32 * kSkinnyWarps) skinny_gemm_kernel(float* y, Bf16Bits* h,
                                                                     const Bf16Bits* x,
                                                                     const Bf16Bits* w, int n,
                                                                     int in, int out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  // The block's 16 weight rows: output rows [16 b, 16 b + 16), or for
  // SwiGLU gate rows [8 b, 8 b + 8) over their up rows.
  int row_lo, row_hi, feature_lo, feature_hi;
  if constexpr (kEpilogue == SkinnyEpilogue::kSwiglu) {
    feature_lo = feature_hi = blockIdx.x * 8 + g;
    row_lo = feature_lo, row_hi = out + feature_lo;
  } else {
    feature_lo = blockIdx.x * 16 + g, feature_hi = feature_lo + 8;
    row_lo = feature_lo, row_hi = feature_hi;
  }
  const bool lo_ok = feature_lo < out, hi_ok = feature_hi < out;
  const Bf16Bits* w_lo = w + static_cast<size_t>(lo_ok ? row_lo : 0) * in;
  const Bf16Bits* w_hi = w + static_cast<size_t>(hi_ok ? row_hi : 0) * in;
  const int k_span = in / kSkinnyWarps;  // a multiple of 32 (skinny_gemm_supported)
  const int k_begin = warp * k_span + 8 * t, k_end = (warp + 1) * k_span;
  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  // The first weights load before the wait on the predecessor (no kernel
  // writes them); each chunk's MMAs then run while the next one's load.
  uint4 a_lo = load16_or_zero(w_lo + k_begin, lo_ok && k_begin < k_end);
  uint4 a_hi = load16_or_zero(w_hi + k_begin, hi_ok && k_begin < k_end);
  begin_dependent();
  for (int k = k_begin; k < k_end; k += 32) {
    uint4 b[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int row = 8 * j + g;
      b[j] = load16_or_zero(x + static_cast<size_t>(row < n ? row : 0) * in + k, row < n);
    }
    const bool more = k + 32 < k_end;
    const uint4 next_lo = load16_or_zero(w_lo + k + 32, lo_ok && more);
    const uint4 next_hi = load16_or_zero(w_hi + k + 32, hi_ok && more);
    const uint32_t a0[4] = {a_lo.x, a_hi.x, a_lo.y, a_hi.y};
    const uint32_t a1[4] = {a_lo.z, a_hi.z, a_lo.w, a_hi.w};
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const uint32_t b0[2] = {b[j].x, b[j].y}, b1[2] = {b[j].z, b[j].w};
      mma(acc[j], a0, b0);
      mma(acc[j], a1, b1);
    }
    a_lo = next_lo, a_hi = next_hi;
  }
  // The warps' partial sums, [warp][lane][NT * 4], summed in warp order.
  extern __shared__ float skinny_partial[];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
#pragma unroll
    for (int v = 0; v < 4; ++v) skinny_partial[(warp * 32 + lane) * NT * 4 + j * 4 + v] = acc[j][v];
  }
  __syncthreads();
  // One item per (lane, tile, column pair): rows g and g + 8 at x row
  // 8j + 2t + e.
  for (int item = threadIdx.x; item < 32 * NT * 2; item += blockDim.x) {
    const int l = item / (NT * 2), j = item / 2 % NT, e = item % 2;
    float lo = 0.0f, hi = 0.0f;
    for (int q = 0; q < kSkinnyWarps; ++q) {
      const float* p = skinny_partial + (q * 32 + l) * NT * 4 + j * 4;
      lo += p[e], hi += p[2 + e];
    }
    const int r = 8 * j + 2 * (l & 3) + e;
    const int f_lo = kEpilogue == SkinnyEpilogue::kSwiglu ? blockIdx.x * 8 + (l >> 2)
                                                          : blockIdx.x * 16 + (l >> 2);
    if (r >= n || f_lo >= out) continue;
    if constexpr (kEpilogue == SkinnyEpilogue::kSwiglu) {
      h[static_cast<size_t>(r) * out + f_lo] = to_bf16_bits(lo / (1.0f + __expf(-lo)) * hi);
    } else {
      float* at = y + static_cast<size_t>(r) * out + f_lo;
      if constexpr (kEpilogue == SkinnyEpilogue::kAccumulate) {
        at[0] += lo;
        if (f_lo + 8 < out) at[8] += hi;
      } else {
        at[0] = lo;
        if (f_lo + 8 < out) at[8] = hi;
      }
    }
  }
}

bool skinny_gemm_supported(int n, int in) {
  return n >= 1 && n <= kSkinnyMaxRows && in % (32 * kSkinnyWarps) == 0;
}

// Calls f(std::integral_constant<int, NT>) with NT the tiles of 8 rows that
// hold n, among the counts the decode buckets use.
template <typename F>
void with_tiles(int n, F&& f) {
  const int tiles = (n + 7) / 8;
  if (tiles <= 1) return f(std::integral_constant<int, 1>{});
  if (tiles <= 2) return f(std::integral_constant<int, 2>{});
  if (tiles <= 3) return f(std::integral_constant<int, 3>{});
  if (tiles <= 4) return f(std::integral_constant<int, 4>{});
  if (tiles <= 6) return f(std::integral_constant<int, 6>{});
  return f(std::integral_constant<int, 8>{});
}

template <SkinnyEpilogue kEpilogue>
void launch_skinny(float* y, Bf16Bits* h, const Bf16Bits* x, const Bf16Bits* w, int n, int in,
                   int out, CUstream_st* stream) {
  const unsigned blocks = kEpilogue == SkinnyEpilogue::kSwiglu ? (out + 7) / 8 : (out + 15) / 16;
  with_tiles(n, [&](auto tiles) {
    constexpr int NT = decltype(tiles)::value;
    const size_t smem = sizeof(float) * kSkinnyWarps * 32 * NT * 4;
    launch_dependent(skinny_gemm_kernel<NT, kEpilogue>, blocks, 32 * kSkinnyWarps, smem, stream, y,
                     h, x, w, n, in, out);
  });
}

void skinny_gemm_bf16(float* y, const Bf16Bits* x, const Bf16Bits* w, int n, int in, int out,
                      CUstream_st* stream, GemvOutput output) {
  if (output == GemvOutput::kAccumulate) {
    launch_skinny<SkinnyEpilogue::kAccumulate>(y, nullptr, x, w, n, in, out, stream);
  } else {
    launch_skinny<SkinnyEpilogue::kStore>(y, nullptr, x, w, n, in, out, stream);
  }
}

void skinny_gemm_swiglu_bf16(Bf16Bits* h, const Bf16Bits* x, const Bf16Bits* w, int n, int in,
                             int intermediate, CUstream_st* stream) {
  launch_skinny<SkinnyEpilogue::kSwiglu>(nullptr, h, x, w, n, in, intermediate, stream);
}

}  // namespace cohort::models::cuda
