// CUDA LoRA over runs of rows that share an adapter (contract: lora_rows.h,
// lora_runs_bf16; CPU reference: lora_shrink then lora_expand with every
// row of a run naming its adapter).
//
// A prompt's rows are consecutive and take one adapter. The per-row kernel
// (lora_rows.cuh) serves them in tiles of 16 rows, each tile a cluster
// that shrinks, meets its peers and expands over the whole target: at
// 2,048 rows it ran some 180 µs a call on the 8B shape, 45% on top of a
// prompt's time to first token (bench/RESULTS.md). Here the two halves are
// launches of their own over 16-row tiles of the runs:
//
//  * Shrink: a cluster of 8 blocks per (tile, target) multiplies the tile's
//    rows by the adapter's A on the tensor cores, each block over an eighth
//    of x's columns (its warps over every 8th k-step of 16 of it); the
//    blocks' sums meet through distributed shared memory in block order
//    and t = scale · x Aᵀ (fp32) goes to a scratch row per row. One block
//    over all of x's columns waited on some 30 dependent loads a warp.
//  * Expand: a block per (tile, 256 outputs, target) adds t Bᵀ into y, t as
//    the MMA's A operand in two bf16 parts (hi + lo, about 16 bits of
//    mantissa, as the per-row kernel does), B's rows as its B operand.
//
// Expand's blocks span the outputs as a GEMM's do, so y is read and written
// once and B's rows come from L2. On an H100 (8B shape, 8 adapters) a
// 2,048-token prompt's first token came after 80.3 ms this way against 85.2
// through the per-row kernel (59.3 without adapters); at 512-row runs the
// per-row kernel was faster, so the engine sends only long runs here
// (CudaGraphEngine's run_rows).
#pragma once

#include <cooperative_groups.h>

#include <algorithm>

#include "base/check.h"
#include "models/cuda/common.cuh"
#include "models/ops/lora_rows.cuh"

namespace cohort::models::cuda {

constexpr int kLoraRunWarps = 8;
constexpr int kLoraRunClusterBlocks = 8;  // a shrink tile's blocks, each over an eighth of x's columns
constexpr int kLoraRunOutputs = 32 * kLoraRunWarps;  // an expand block's outputs (a warp's: 4 MMA tiles)

__global__ void __launch_bounds__(32 * kLoraRunWarps)
    lora_run_shrink_kernel(float* t, const Bf16Bits* x, const Bf16Bits* const* a, const Bf16Bits* const* b,
                           const int32_t* ranks, const float* scales, const int32_t* tiles, int in,
                           size_t table_stride) {
  namespace cg = cooperative_groups;
  __shared__ float partial[kLoraRunWarps][16][kLoraMaxRank];  // the warps' sums over their k-steps
  __shared__ float share[16][kLoraMaxRank];                   // this block's, which its peers read
  const int block = static_cast<int>(blockIdx.x) % kLoraRunClusterBlocks;
  const int tile = static_cast<int>(blockIdx.x) / kLoraRunClusterBlocks;
  const int first = tiles[3 * tile], rows = tiles[3 * tile + 1], slot = tiles[3 * tile + 2];
  const int z = static_cast<int>(blockIdx.y);
  const Bf16Bits* A = a[z * table_stride + slot];
  const int rank = ranks[slot];
  // The whole cluster returns (same tile and target): expand skips it too.
  if (!A || !b[z * table_stride + slot] || rank <= 0 || rank > kLoraMaxRank) return;
  begin_dependent();
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane / 4, tq = lane % 4;
  const bool a_in = g < rows, b_in = g + 8 < rows;
  const Bf16Bits* xa = x + static_cast<size_t>(first + (a_in ? g : 0)) * in;
  const Bf16Bits* xb = x + static_cast<size_t>(first + (b_in ? g + 8 : 0)) * in;
  // This block's columns of x: an eighth, in k-steps of 16.
  const int slice = (in + 16 * kLoraRunClusterBlocks - 1) / (16 * kLoraRunClusterBlocks) * 16;
  const int k_begin = min(in, block * slice), k_end = min(in, k_begin + slice);
  const int ntiles = (rank + 7) / 8;
  const Bf16Bits* a_row[kLoraMaxRank / 8];
#pragma unroll
  for (int nt = 0; nt < kLoraMaxRank / 8; ++nt) {
    const int c = nt * 8 + g;
    a_row[nt] = c < rank ? A + static_cast<size_t>(c) * in : nullptr;
  }
  float acc[kLoraMaxRank / 8][4] = {};
#pragma unroll 2
  for (int k0 = k_begin + warp * 16; k0 < k_end; k0 += 16 * kLoraRunWarps) {
    const int k = k0 + 2 * tq;
    uint32_t xf[4];
    xf[0] = a_in ? lora_bf16_pair(xa, k, k_end, true) : 0u;
    xf[1] = b_in ? lora_bf16_pair(xb, k, k_end, true) : 0u;
    xf[2] = a_in ? lora_bf16_pair(xa, k + 8, k_end, true) : 0u;
    xf[3] = b_in ? lora_bf16_pair(xb, k + 8, k_end, true) : 0u;
    uint32_t bf[kLoraMaxRank / 8][2];
#pragma unroll
    for (int nt = 0; nt < kLoraMaxRank / 8; ++nt) {
      const bool live = nt < ntiles && a_row[nt];
      bf[nt][0] = live ? lora_bf16_pair(a_row[nt], k, k_end, true) : 0u;
      bf[nt][1] = live ? lora_bf16_pair(a_row[nt], k + 8, k_end, true) : 0u;
    }
#pragma unroll
    for (int nt = 0; nt < kLoraMaxRank / 8; ++nt) {
      if (nt < ntiles) mma(acc[nt], xf, bf[nt]);
    }
  }
#pragma unroll
  for (int nt = 0; nt < kLoraMaxRank / 8; ++nt) {
    if (nt >= ntiles) break;
    const int c = nt * 8 + 2 * tq;
    partial[warp][g][c] = acc[nt][0], partial[warp][g][c + 1] = acc[nt][1];
    partial[warp][g + 8][c] = acc[nt][2], partial[warp][g + 8][c + 1] = acc[nt][3];
  }
  __syncthreads();
  for (int e = static_cast<int>(threadIdx.x); e < 16 * rank; e += blockDim.x) {
    const int r = e / rank, c = e % rank;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kLoraRunWarps; ++w) sum += partial[w][r][c];
    share[r][c] = sum;
  }
  // The cluster's shares in block order (deterministic), each element by
  // one thread of the cluster.
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const float scale = scales[slot];
  for (int e = block * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x); e < rows * rank;
       e += kLoraRunClusterBlocks * static_cast<int>(blockDim.x)) {
    const int r = e / rank, c = e % rank;
    float sum = 0.0f;
    for (int q = 0; q < kLoraRunClusterBlocks; ++q) sum += cluster.map_shared_rank(&share[0][0], q)[r * kLoraMaxRank + c];
    t[static_cast<size_t>(first + r) * kLoraRunScratchStride + z * kLoraMaxRank + c] = scale * sum;
  }
  cluster.sync();  // no block leaves while a peer reads its share
}

__global__ void __launch_bounds__(32 * kLoraRunWarps)
    lora_run_expand_kernel(float* y, int y_stride, const float* t, const Bf16Bits* const* a,
                           const Bf16Bits* const* b, const int32_t* ranks, const int32_t* tiles,
                           size_t table_stride, LoraTargets targets) {
  const int first = tiles[3 * blockIdx.x], rows = tiles[3 * blockIdx.x + 1], slot = tiles[3 * blockIdx.x + 2];
  const int z = static_cast<int>(blockIdx.z);
  const int width = targets.width[z];
  const int col0 = static_cast<int>(blockIdx.y) * kLoraRunOutputs + static_cast<int>(threadIdx.x / 32) * 32;
  const Bf16Bits* B = b[z * table_stride + slot];
  const int rank = ranks[slot];
  if (col0 >= width || !B || !a[z * table_stride + slot] || rank <= 0 || rank > kLoraMaxRank) return;
  const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, tq = lane % 4;
  const bool a_in = g < rows, b_in = g + 8 < rows;
  const float* ta = t + static_cast<size_t>(first + g) * kLoraRunScratchStride + z * kLoraMaxRank;
  const float* tb = t + static_cast<size_t>(first + g + 8) * kLoraRunScratchStride + z * kLoraMaxRank;
  const int ksteps = (rank + 15) / 16;
  // This lane's A fragments: rows g and g + 8, columns k, k + 1, k + 8,
  // k + 9 of each k-step, as a bf16 pair.
  uint32_t hi[kLoraMaxRank / 16][4], lo[kLoraMaxRank / 16][4];
#pragma unroll
  for (int ks = 0; ks < kLoraMaxRank / 16; ++ks) {
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int col = ks * 16 + 2 * tq + (j & 1) + (j >= 4 ? 8 : 0);
      const bool upper = (j >> 1) & 1;  // row g + 8
      v[j] = ks < ksteps && col < rank && (upper ? b_in : a_in) ? (upper ? tb : ta)[col] : 0.0f;
    }
    lora_split_fragment(v, hi[ks], lo[ks]);
  }
  const bool even = rank % 2 == 0;
  float* ya = y + static_cast<size_t>(first + g) * y_stride + targets.column[z];
  float* yb = y + static_cast<size_t>(first + g + 8) * y_stride + targets.column[z];
  constexpr int kTiles = 4;
  float2 old_a[kTiles], old_b[kTiles];
  uint32_t bf[kLoraMaxRank / 16][kTiles][2];
#pragma unroll
  for (int nt = 0; nt < kTiles; ++nt) {
    const int o = col0 + nt * 8 + 2 * tq;
    const bool live = col0 + nt * 8 < width;
    old_a[nt] = live && a_in ? *reinterpret_cast<const float2*>(ya + o) : make_float2(0.0f, 0.0f);
    old_b[nt] = live && b_in ? *reinterpret_cast<const float2*>(yb + o) : make_float2(0.0f, 0.0f);
    const Bf16Bits* b_row = B + static_cast<size_t>(col0 + nt * 8 + g) * rank;
#pragma unroll
    for (int ks = 0; ks < kLoraMaxRank / 16; ++ks) {
      const bool load = live && ks < ksteps;
      bf[ks][nt][0] = load ? lora_bf16_pair(b_row, ks * 16 + 2 * tq, rank, even) : 0u;
      bf[ks][nt][1] = load ? lora_bf16_pair(b_row, ks * 16 + 2 * tq + 8, rank, even) : 0u;
    }
  }
  lora_expand_tiles(hi, lo, bf, ksteps, old_a, old_b, ya, yb, a_in, b_in, col0, width, tq);
}

void lora_runs_bf16(float* y, int y_stride, const Bf16Bits* x, const Bf16Bits* const* a, const Bf16Bits* const* b,
                    const int32_t* ranks, const float* scales, const int32_t* tiles, int tile_count, float* t,
                    int in, const LoraTargets& targets, CUstream_st* stream) {
  if (tile_count <= 0) return;
  COHORT_CHECK_MSG(in % 8 == 0 && y_stride % 2 == 0, "LoRA runs: in {} and y's stride {}", in, y_stride);
  int widest = 0;
  for (int z = 0; z < targets.count; ++z) {
    COHORT_CHECK_MSG(targets.width[z] % 8 == 0 && targets.column[z] % 2 == 0, "LoRA runs: target {} of {} at {}", z,
                     targets.width[z], targets.column[z]);
    widest = std::max(widest, targets.width[z]);
  }
  COHORT_CUDA_CHECK_FATAL(launch_dependent_in_clusters(
      lora_run_shrink_kernel, dim3(tile_count * kLoraRunClusterBlocks, targets.count), kLoraRunClusterBlocks,
      32 * kLoraRunWarps, 0, stream, t, x, a, b, ranks, scales, tiles, in, targets.table_stride));
  const int chunks = (widest + kLoraRunOutputs - 1) / kLoraRunOutputs;
  lora_run_expand_kernel<<<dim3(tile_count, chunks, targets.count), 32 * kLoraRunWarps, 0, stream>>>(
      y, y_stride, t, a, b, ranks, tiles, targets.table_stride, targets);
  COHORT_CUDA_CHECK_FATAL(cudaGetLastError());
}

}  // namespace cohort::models::cuda
