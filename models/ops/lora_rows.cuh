// CUDA per-row LoRA (contract and CPU reference: lora_rows.h): shrink and
// expand in one launch for the targets that share an input.
//
// A cluster of kLoraClusterBlocks blocks takes 16 rows and one target.
// Each block shrinks over its share of x's columns on the tensor cores
// (16 rows as the MMA's A operand, the adapter's A rows as B), once per
// distinct adapter among the 16 rows: one but at a sequence's edge in a
// prompt, up to 16 in a decode step whose rows take adapters in turn. The
// blocks' partial t meet through distributed shared memory (summed in
// block order: deterministic), and each block then expands its share of
// the target's outputs: t as the A operand, scaled and zero outside the
// adapter's rows (so an adapter adds only to its own rows), entering as a
// bf16 pair (hi + lo, about 16 bits of mantissa), B's rows as the B operand.
//
// The 16 rows of a tile are rows row_order[16 i ..] where the caller sorts
// them by adapter (the engine does, as it stages them), so that a decode
// step's rows, which take adapters in turn, give tiles of one or two
// adapters instead of up to 16, each a pass of the loops below.
//
// One launch instead of a shrink and an expand: a decode step's adapters
// cost 4 launches a layer, not 8, and t never goes through global memory.
// The earlier per-element expand re-read t and B for every output and ran
// at a seventh of y's read-modify-write bandwidth on prompt rows.
//
// It launches as a dependent of the kernel before it (common.cuh): the
// tables and row indices are staged before the step, so it reads them
// before it waits.
#pragma once

#include <cooperative_groups.h>

#include "models/cuda/common.cuh"
#include "models/ops/lora_rows.h"

namespace cohort::models::cuda {

constexpr int kLoraClusterBlocks = 8;  // a portable cluster size
constexpr int kLoraWarps = 4;
constexpr int kLoraWarpColumns = 64;  // outputs of one expand pass of a warp

// Two consecutive bf16 (k, k + 1) of a row as an MMA operand register, 0
// past `limit`; `aligned` where the row's element offset is even.
__device__ __forceinline__ uint32_t lora_bf16_pair(const Bf16Bits* row, int k, int limit, bool aligned) {
  if (k + 1 < limit && aligned) return __ldg(reinterpret_cast<const uint32_t*>(row + k));
  const uint32_t lo = k < limit ? __ldg(row + k) : 0u, hi = k + 1 < limit ? __ldg(row + k + 1) : 0u;
  return lo | (hi << 16);
}

// Takes the next adapter among the rows not yet `done` (adding its rows to
// done); -1 once every row is.
__device__ __forceinline__ int next_lora_adapter(const int (&adapters)[16], uint32_t& done) {
  if (done == 0xffffu) return -1;
  const int adapter = adapters[__ffs(~done) - 1];
  for (int i = 0; i < 16; ++i) done |= adapters[i] == adapter ? 1u << i : 0u;
  return adapter;
}

__global__ void __launch_bounds__(32 * kLoraWarps, 4)
    lora_rows_kernel(float* y, int y_stride, const Bf16Bits* x, const Bf16Bits* const* a, const Bf16Bits* const* b,
                     const int32_t* ranks, const float* scales, const int32_t* row_adapter, const int32_t* row_order,
                     int n, int in, size_t table_stride, LoraTargets targets) {
  namespace cg = cooperative_groups;
  __shared__ int adapters[16];
  __shared__ int sources[16];  // the rows of x and y the tile's rows are
  __shared__ float partial[kLoraWarps][16][kLoraMaxRank];  // the warps' sums over their columns
  __shared__ float share[16][kLoraMaxRank];                // this block's columns' t, which its peers read
  __shared__ float t[16][kLoraMaxRank];                    // the whole t of the rows
  const int block = static_cast<int>(blockIdx.x) % kLoraClusterBlocks;
  const int row0 = static_cast<int>(blockIdx.x) / kLoraClusterBlocks * 16, z = static_cast<int>(blockIdx.z);
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane / 4, tq = lane % 4;
  const Bf16Bits* const* a_table = a + z * table_stride;
  const Bf16Bits* const* b_table = b + z * table_stride;
  if (threadIdx.x < 16) {
    const int i = row0 + static_cast<int>(threadIdx.x);
    const int r = i < n ? (row_order ? row_order[i] : i) : n - 1;
    sources[threadIdx.x] = r;
    int adapter = i < n ? row_adapter[r] : -1;
    if (adapter >= 0 && (!a_table[adapter] || !b_table[adapter] || ranks[adapter] <= 0)) adapter = -1;
    adapters[threadIdx.x] = adapter;
  }
  __syncthreads();
  uint32_t none = 0;
  for (int i = 0; i < 16; ++i) none |= adapters[i] < 0 ? 1u << i : 0u;
  begin_dependent();

  // Shrink over this block's columns of x, k-steps of 16 split over the warps.
  const int slice = (in + 16 * kLoraClusterBlocks - 1) / (16 * kLoraClusterBlocks) * 16;
  const int k_begin = block * slice, k_end = min(in, k_begin + slice);
  const bool a_in = row0 + g < n, b_in = row0 + g + 8 < n;
  const Bf16Bits* xa = x + static_cast<size_t>(sources[g]) * in;
  const Bf16Bits* xb = x + static_cast<size_t>(sources[g + 8]) * in;
  uint32_t done = none;
  for (int adapter; (adapter = next_lora_adapter(adapters, done)) >= 0;) {
    const Bf16Bits* w = a_table[adapter];
    const int rank = ranks[adapter], ntiles = (rank + 7) / 8;
    float c[kLoraMaxRank / 8][4] = {};
    for (int k0 = k_begin + warp * 16; k0 < k_end; k0 += 16 * kLoraWarps) {
      const int k = k0 + 2 * tq;
      const uint32_t frag[4] = {a_in ? lora_bf16_pair(xa, k, k_end, true) : 0u,
                                b_in ? lora_bf16_pair(xb, k, k_end, true) : 0u,
                                a_in ? lora_bf16_pair(xa, k + 8, k_end, true) : 0u,
                                b_in ? lora_bf16_pair(xb, k + 8, k_end, true) : 0u};
#pragma unroll
      for (int nt = 0; nt < kLoraMaxRank / 8; ++nt) {
        if (nt >= ntiles) break;
        const int index = nt * 8 + g;  // the rank index of this lane's B column
        const Bf16Bits* wr = w + static_cast<size_t>(min(index, rank - 1)) * in;
        const uint32_t bfrag[2] = {index < rank ? lora_bf16_pair(wr, k, k_end, true) : 0u,
                                   index < rank ? lora_bf16_pair(wr, k + 8, k_end, true) : 0u};
        mma(c[nt], frag, bfrag);
      }
    }
#pragma unroll
    for (int nt = 0; nt < kLoraMaxRank / 8; ++nt) {
      if (nt >= ntiles) break;
      partial[warp][g][nt * 8 + 2 * tq] = c[nt][0], partial[warp][g][nt * 8 + 2 * tq + 1] = c[nt][1];
      partial[warp][g + 8][nt * 8 + 2 * tq] = c[nt][2], partial[warp][g + 8][nt * 8 + 2 * tq + 1] = c[nt][3];
    }
    __syncthreads();
    for (int e = static_cast<int>(threadIdx.x); e < 16 * rank; e += blockDim.x) {
      const int r = e / rank, col = e % rank;
      if (adapters[r] != adapter) continue;
      float sum = 0.0f;
#pragma unroll
      for (int v = 0; v < kLoraWarps; ++v) sum += partial[v][r][col];
      share[r][col] = sum;
    }
    __syncthreads();  // partial is the next adapter's
  }

  // The rows' whole t: the cluster's shares in block order.
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  for (int e = static_cast<int>(threadIdx.x); e < 16 * kLoraMaxRank; e += blockDim.x) {
    const int r = e / kLoraMaxRank, col = e % kLoraMaxRank;
    const int adapter = adapters[r];
    if (adapter < 0 || col >= ranks[adapter]) continue;
    float sum = 0.0f;
    for (int q = 0; q < kLoraClusterBlocks; ++q) sum += cluster.map_shared_rank(&share[0][0], q)[e];
    t[r][col] = sum;
  }
  cluster.sync();  // t complete; no block leaves while a peer reads its share

  // Expand this block's share of the target's outputs (widths are
  // multiples of 8: an MMA's 8 columns are in or out whole).
  const int width = targets.width[z];
  const int per = (width + 8 * kLoraClusterBlocks - 1) / (8 * kLoraClusterBlocks) * 8;
  const int o_begin = block * per, o_end = min(width, o_begin + per);
  const int adapter_a = adapters[g], adapter_b = adapters[g + 8];
  float* ya = y + static_cast<size_t>(sources[g]) * y_stride + targets.column[z];
  float* yb = y + static_cast<size_t>(sources[g + 8]) * y_stride + targets.column[z];
  for (int col0 = o_begin + warp * kLoraWarpColumns; col0 < o_end; col0 += kLoraWarps * kLoraWarpColumns) {
    float c[kLoraWarpColumns / 8][4] = {};
    done = none;
    for (int adapter; (adapter = next_lora_adapter(adapters, done)) >= 0;) {
      const Bf16Bits* w = b_table[adapter];
      const int rank = ranks[adapter];
      const bool aligned = rank % 2 == 0;
      const float sa = adapter_a == adapter ? scales[adapter] : 0.0f;
      const float sb = adapter_b == adapter ? scales[adapter] : 0.0f;
      for (int k0 = 0; k0 < rank; k0 += 16) {
        // This lane's A fragment: rows g and g + 8, columns k, k + 1, k + 8,
        // k + 9, in fragment order, scaled, as bf16 hi + lo.
        const int k = k0 + 2 * tq;
        float v[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int col = k + (j & 1) + (j >= 4 ? 8 : 0);
          const bool upper = (j >> 1) & 1;  // rows g + 8
          const float s = upper ? sb : sa;
          v[j] = s != 0.0f && col < rank ? s * t[upper ? g + 8 : g][col] : 0.0f;
        }
        uint32_t hi[4], lo[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float h0 = __bfloat162float(__float2bfloat16_rn(v[2 * j]));
          const float h1 = __bfloat162float(__float2bfloat16_rn(v[2 * j + 1]));
          hi[j] = pack_bf16x2(h0, h1);
          lo[j] = pack_bf16x2(v[2 * j] - h0, v[2 * j + 1] - h1);
        }
#pragma unroll
        for (int nt = 0; nt < kLoraWarpColumns / 8; ++nt) {
          if (col0 + nt * 8 >= o_end) break;
          const Bf16Bits* br = w + static_cast<size_t>(col0 + nt * 8 + g) * rank;  // B column: an output
          const uint32_t bfrag[2] = {lora_bf16_pair(br, k, rank, aligned), lora_bf16_pair(br, k + 8, rank, aligned)};
          mma(c[nt], hi, bfrag);
          mma(c[nt], lo, bfrag);
        }
      }
    }
#pragma unroll
    for (int nt = 0; nt < kLoraWarpColumns / 8; ++nt) {
      const int col = col0 + nt * 8 + 2 * tq;
      if (col0 + nt * 8 >= o_end) break;
      if (adapter_a >= 0) {
        float2* p = reinterpret_cast<float2*>(ya + col);
        const float2 old = *p;
        *p = make_float2(old.x + c[nt][0], old.y + c[nt][1]);
      }
      if (adapter_b >= 0) {
        float2* p = reinterpret_cast<float2*>(yb + col);
        const float2 old = *p;
        *p = make_float2(old.x + c[nt][2], old.y + c[nt][3]);
      }
    }
  }
}

void lora_rows_bf16(float* y, int y_stride, const Bf16Bits* x, const Bf16Bits* const* a, const Bf16Bits* const* b,
                    const int32_t* ranks, const float* scales, const int32_t* row_adapter, const int32_t* row_order,
                    int n, int in, const LoraTargets& targets, CUstream_st* stream) {
  if (n <= 0) return;
  const dim3 grid((n + 15) / 16 * kLoraClusterBlocks, 1, targets.count);
  COHORT_CUDA_CHECK_FATAL(launch_dependent_in_clusters(lora_rows_kernel, grid, kLoraClusterBlocks, 32 * kLoraWarps,
                                                       0, stream, y, y_stride, x, a, b, ranks, scales, row_adapter,
                                                       row_order, n, in, targets.table_stride, targets));
}

void lora_rows_bf16(float* y, int y_stride, const Bf16Bits* x, const Bf16Bits* const* a, const Bf16Bits* const* b,
                    const int32_t* ranks, const float* scales, const int32_t* row_adapter, const int32_t* row_order,
                    int n, int in, int out, CUstream_st* stream) {
  LoraTargets one;
  one.width[0] = out;
  lora_rows_bf16(y, y_stride, x, a, b, ranks, scales, row_adapter, row_order, n, in, one, stream);
}

}  // namespace cohort::models::cuda
