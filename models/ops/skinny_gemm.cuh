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
//  * K is split over the eight warps of a block and over `splits` blocks
//    per output tile, so that each warp has only a chunk or a few, loaded
//    two or four at a time before their MMAs: the kernel is a memory round
//    trip or two deep, as the GEMV is. Warps meet in shared memory; blocks
//    in a scratch buffer, where the last block of a tile to finish (an
//    atomic count) adds the others' sums in split order. Both orders are
//    fixed, so results are deterministic.
//  * Epilogues: store, add into y (the residual stream takes an output
//    projection in place), or SwiGLU, where a block's 16 rows are 8 gate
//    rows and their 8 up rows, so each lane holds both halves of its outputs.
//  * The weights come from a source type: bf16 rows here (SkinnyBf16Weights),
//    or the row layout's codes decoded in registers as they load
//    (quant_gemv.cuh's SkinnyPackedWeights), so quantized projections take
//    the same tensor-core path at 9 to 64 rows.
#pragma once

#include <cuda_bf16.h>

#include "models/cuda/common.cuh"
#include "models/ops/gemv.h"
#include "models/ops/tile_gemm.cuh"

namespace cohort::models::cuda {

constexpr int kSkinnyWarps = 8;
enum class SkinnyEpilogue { kStore, kAccumulate, kSwiglu };

// Weights through the read-only path (no kernel writes them, so these loads
// may run before the wait on the predecessor); x, the predecessor's output,
// with plain loads: the compiler treats read-only loads as invariant and may
// move them above griddepcontrol.wait, before the data exists.
__device__ __forceinline__ uint4 load16_or_zero(const Bf16Bits* p, bool valid) {
  return valid ? __ldg(reinterpret_cast<const uint4*>(p)) : make_uint4(0, 0, 0, 0);
}
__device__ __forceinline__ uint4 load16_input_or_zero(const Bf16Bits* p, bool valid) {
  return valid ? *reinterpret_cast<const uint4*>(p) : make_uint4(0, 0, 0, 0);
}

// The weights [out, in] (for SwiGLU [2 out, in]: gate rows, then up rows),
// bf16 row-major: row(r, in) names a row, load(row, k, valid) gives its 8
// values at columns [k, k + 8) as bf16 pairs (zeros where !valid). The
// width comes from the kernel's arguments rather than a copy here, which
// would hold one more register (and spill at 4 and 8 tiles).
struct SkinnyBf16Weights {
  const Bf16Bits* w;
  using Row = const Bf16Bits*;
  __device__ __forceinline__ Row row(int r, int in) const { return w + static_cast<size_t>(r) * in; }
  __device__ __forceinline__ uint4 load(Row row, int k, bool valid) const { return load16_or_zero(row + k, valid); }
};

struct SkinnyArgs {
  float* y;            // kStore / kAccumulate: [n, out] fp32
  Bf16Bits* h;         // kSwiglu: [n, out] bf16
  const Bf16Bits* x;   // [n, in]
  int n, in, out;
  int splits;          // blocks per output tile along K (gridDim.y)
  float* partials;     // [tiles, splits, NT * 4 values, 32 lanes] when splits > 1
  int* arrivals;       // [tiles], zero between calls
};

// One output tile (16 weight rows) over one K range of in / splits.
template <int NT, SkinnyEpilogue kEpilogue, typename Weights>
__global__ void __launch_bounds__(32 * kSkinnyWarps, 2) skinny_gemm_kernel(SkinnyArgs a, Weights weights) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int tile = blockIdx.x, split = blockIdx.y;
  // The tile's 16 weight rows: output rows [16 b, 16 b + 16), or for
  // SwiGLU gate rows [8 b, 8 b + 8) over their up rows.
  const bool swiglu = kEpilogue == SkinnyEpilogue::kSwiglu;
  const int f_lo = swiglu ? tile * 8 + g : tile * 16 + g;
  const int f_hi = swiglu ? f_lo : f_lo + 8;
  const bool lo_ok = f_lo < a.out, hi_ok = f_hi < a.out;
  const typename Weights::Row w_lo = weights.row(lo_ok ? f_lo : 0, a.in);
  const typename Weights::Row w_hi = weights.row(hi_ok ? (swiglu ? a.out + f_hi : f_hi) : 0, a.in);
  // This warp's chunks: k_span / 32 of them, k_span = in / splits / warps.
  const int k_span = a.in / a.splits / kSkinnyWarps;
  const int k0 = (split * kSkinnyWarps + warp) * k_span + 8 * t;
  const int chunks = k_span / 32;
  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  // 32-element K chunks whose loads are in flight together.
  constexpr int kChunks = NT >= 6 ? 2 : 4;
  for (int c0 = 0; c0 < chunks; c0 += kChunks) {
    uint4 wl[kChunks], wh[kChunks], b[kChunks][NT];
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const bool live = c0 + c < chunks;
      const int k = k0 + (c0 + c) * 32;
      wl[c] = weights.load(w_lo, k, live && lo_ok);
      wh[c] = weights.load(w_hi, k, live && hi_ok);
    }
    // Weights are no kernel's output: the first ones load before the wait
    // on the predecessor, x after it.
    if (c0 == 0) begin_dependent();
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const bool live = c0 + c < chunks;
      const int k = k0 + (c0 + c) * 32;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const int row = 8 * j + g;
        b[c][j] = load16_input_or_zero(a.x + static_cast<size_t>(row < a.n ? row : 0) * a.in + k,
                                       live && row < a.n);
      }
    }
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      if (c0 + c >= chunks) break;
      const uint32_t a0[4] = {wl[c].x, wh[c].x, wl[c].y, wh[c].y};
      const uint32_t a1[4] = {wl[c].z, wh[c].z, wl[c].w, wh[c].w};
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const uint32_t b0[2] = {b[c][j].x, b[c][j].y}, b1[2] = {b[c][j].z, b[c][j].w};
        mma(acc[j], a0, b0);
        mma(acc[j], a1, b1);
      }
    }
  }
  if (chunks == 0) begin_dependent();
  // The warps' sums, [warp][value][lane] (lanes adjacent: no bank
  // conflicts), added in warp order into warp 0's slots.
  constexpr int kPerLane = NT * 4;
  extern __shared__ float skinny_shared[];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
#pragma unroll
    for (int v = 0; v < 4; ++v) skinny_shared[(warp * kPerLane + j * 4 + v) * 32 + lane] = acc[j][v];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 32 * kPerLane; i += blockDim.x) {
    float sum = 0.0f;
    for (int q = 0; q < kSkinnyWarps; ++q) sum += skinny_shared[q * 32 * kPerLane + i];
    skinny_shared[i] = sum;
  }
  __syncthreads();
  const float* sums = skinny_shared;
  if (a.splits > 1) {
    // Publish this block's sums; the tile's last block adds all of them.
    __shared__ bool last;
    float* mine = a.partials + (static_cast<size_t>(tile) * a.splits + split) * 32 * kPerLane;
    for (int i = threadIdx.x; i < 32 * kPerLane; i += blockDim.x) mine[i] = skinny_shared[i];
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(a.arrivals + tile, 1) == a.splits - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    const float* all = a.partials + static_cast<size_t>(tile) * a.splits * 32 * kPerLane;
    for (int i = threadIdx.x; i < 32 * kPerLane; i += blockDim.x) {
      float sum = 0.0f;
      for (int s = 0; s < a.splits; ++s) sum += __ldcg(all + static_cast<size_t>(s) * 32 * kPerLane + i);
      skinny_shared[i] = sum;
    }
    if (threadIdx.x == 0) a.arrivals[tile] = 0;  // ready for the next call
    __syncthreads();
  }
  // One item per (x tile, column pair, lane), lanes fastest: rows g and
  // g + 8 (of lane l = 4 g + t) at x row 8j + 2t + e.
  for (int item = threadIdx.x; item < 32 * NT * 2; item += blockDim.x) {
    const int l = item % 32, j = item / 64, e = item / 32 % 2;
    const float lo = sums[(j * 4 + e) * 32 + l], hi = sums[(j * 4 + 2 + e) * 32 + l];
    const int r = 8 * j + 2 * (l & 3) + e;
    const int f = swiglu ? tile * 8 + (l >> 2) : tile * 16 + (l >> 2);
    if (r >= a.n || f >= a.out) continue;
    if constexpr (kEpilogue == SkinnyEpilogue::kSwiglu) {
      a.h[static_cast<size_t>(r) * a.out + f] = to_bf16_bits(lo / (1.0f + __expf(-lo)) * hi);
    } else {
      float* at = a.y + static_cast<size_t>(r) * a.out + f;
      if constexpr (kEpilogue == SkinnyEpilogue::kAccumulate) {
        at[0] += lo;
        if (f + 8 < a.out) at[8] += hi;
      } else {
        at[0] = lo;
        if (f + 8 < a.out) at[8] = hi;
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

// K splits for `tiles` output tiles: as many as keep the grid within
// kSkinnyMaxSplitBlocks (a few blocks a multiprocessor) and each block's K
// range a whole number of the warps' chunks; 1 for grids already that large.
int skinny_splits(int tiles, int in) {
  int splits = 1;
  while (splits < 8 && tiles * splits * 2 <= kSkinnyMaxSplitBlocks &&
         (in / (splits * 2)) % (32 * kSkinnyWarps) == 0) {
    splits *= 2;
  }
  return splits;
}

template <SkinnyEpilogue kEpilogue, typename Weights>
void launch_skinny(float* y, Bf16Bits* h, const Bf16Bits* x, const Weights& w, int n, int in,
                   int out, const SkinnyScratch& scratch, CUstream_st* stream) {
  const int tiles = kEpilogue == SkinnyEpilogue::kSwiglu ? (out + 7) / 8 : (out + 15) / 16;
  const int splits = scratch.partials && scratch.arrivals ? skinny_splits(tiles, in) : 1;
  const SkinnyArgs args{y, h, x, n, in, out, splits, scratch.partials, scratch.arrivals};
  with_tiles(n, [&](auto tile_rows) {
    constexpr int NT = decltype(tile_rows)::value;
    const size_t smem = sizeof(float) * kSkinnyWarps * 32 * NT * 4;
    launch_dependent(skinny_gemm_kernel<NT, kEpilogue, Weights>, dim3(tiles, splits), 32 * kSkinnyWarps,
                     smem, stream, args, w);
  });
}

void skinny_gemm_bf16(float* y, const Bf16Bits* x, const Bf16Bits* w, int n, int in, int out,
                      const SkinnyScratch& scratch, CUstream_st* stream, GemvOutput output,
                      const FoldedNorm& norm) {
  // From 9 rows, shapes the staged tiles take (tile_gemm.cuh).
  const TilePlan plan = tile_plan(n, in, out, false, device_multiprocessors());
  if (plan.bn != 0) return tile_gemm_bf16(plan, y, nullptr, x, w, n, in, out, output, stream, norm);
  COHORT_CHECK_MSG(!norm.in_sumsq && !norm.out_x, "a folded norm needs the tile forms ({} rows)", n);
  const SkinnyBf16Weights weights{w};
  if (output == GemvOutput::kAccumulate) {
    launch_skinny<SkinnyEpilogue::kAccumulate>(y, nullptr, x, weights, n, in, out, scratch, stream);
  } else {
    launch_skinny<SkinnyEpilogue::kStore>(y, nullptr, x, weights, n, in, out, scratch, stream);
  }
}

void skinny_gemm_swiglu_bf16(Bf16Bits* h, const Bf16Bits* x, const Bf16Bits* w, int n, int in,
                             int intermediate, const SkinnyScratch& scratch, CUstream_st* stream,
                             const FoldedNorm& norm) {
  const TilePlan plan = tile_plan(n, in, intermediate, true, device_multiprocessors());
  if (plan.bn != 0) {
    return tile_gemm_bf16(plan, nullptr, h, x, w, n, in, intermediate, GemvOutput::kStore, stream,
                          norm);
  }
  COHORT_CHECK_MSG(!norm.in_sumsq && !norm.out_x, "a folded norm needs the tile forms ({} rows)", n);
  launch_skinny<SkinnyEpilogue::kSwiglu>(nullptr, h, x, SkinnyBf16Weights{w}, n, in, intermediate, scratch,
                                         stream);
}

}  // namespace cohort::models::cuda
