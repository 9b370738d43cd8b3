// CUDA per-row LoRA (contract and CPU reference: lora_rows.h): shrink and
// expand in one launch for the targets that share an input.
//
// A cluster of kLoraClusterBlocks blocks (or 16, a non-portable size
// Hopper schedules, for wide projections: lora_launch_shape) takes a tile
// of 8 rows (the MMA's other 8 empty) for a decode step, 16 for prompts'
// rows, and one target. The
// distinct adapters among the rows (one in a prompt's tile, one or two in a
// decode step's once the engine sorts its rows by adapter) are laid side by
// side as the columns of one pass, kLoraChunk of them at most (more passes
// only where a tile holds more adapters' ranks than that):
//
//  * Shrink: each block multiplies the tile's rows by every column's A row over
//    an eighth of x's columns on the tensor cores (x rows as the MMA's A
//    operand, A rows as its B), each warp with its k-steps' loads in flight
//    together. A row keeps only its own adapter's columns of t.
//  * The blocks' partial t meet through distributed shared memory, summed
//    in block order (deterministic).
//  * Expand: each block takes an eighth of the target's outputs; t, scaled
//    and zero outside each row's adapter's columns, is the MMA's A operand
//    as a bf16 pair (hi + lo, about 16 bits of mantissa), the B rows of the
//    columns' adapters its B operand, so an adapter adds only to its rows.
//    y, B and the products' operands are loaded before any product, and
//    rows without an adapter are never read or written.
//
// Why one pass over all of a tile's adapters: the form before looped over
// them one at a time with each k-step's loads waiting on the last, some
// twenty memory round trips in a row, and took 35 µs a call in a 64-row
// decode step with 8 adapters (4 calls a layer: 3.8 of the step's 6.6 ms on
// an H100, bench/RESULTS.md). The adapters' A and B slices a block reads
// are fetched into L2 before the wait on the predecessor, since the rows'
// adapters are staged before the step.
//
// It launches as a dependent of the kernel before it (common.cuh): the
// tables and row indices are staged before the step, so it reads them
// before it waits.
#pragma once

#include <cooperative_groups.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "base/check.h"
#include "base/env_knobs.h"
#include "models/cuda/common.cuh"
#include "models/ops/gemv.h"
#include "models/ops/lora_rows.h"

namespace cohort::models::cuda {

constexpr int kLoraClusterBlocks = 8;    // a portable cluster size (the default)
constexpr int kLoraWarps = 8;
constexpr int kLoraChunk = kLoraMaxRank; // adapter columns of one pass
constexpr int kLoraShrinkSteps = 2;      // k-steps of 16 a warp has in flight
constexpr int kLoraWarpOutputs = 32;     // outputs of a warp's expand pass (4 MMA tiles)

// Two consecutive bf16 (k, k + 1) of a row as an MMA operand register, 0
// past `limit`; `aligned` where the row's element offset is even.
__device__ __forceinline__ uint32_t lora_bf16_pair(const Bf16Bits* row, int k, int limit, bool aligned) {
  if (k + 1 < limit && aligned) return __ldg(reinterpret_cast<const uint32_t*>(row + k));
  const uint32_t lo = k < limit ? __ldg(row + k) : 0u, hi = k + 1 < limit ? __ldg(row + k + 1) : 0u;
  return lo | (hi << 16);
}

__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// t's eight values of an MMA A fragment (rows g, g + 8; columns k, k + 1,
// k + 8, k + 9 of a k-step) as two bf16 pairs each, hi + lo: about 16 bits
// of mantissa, so that t's rounding stays below the bf16 weights'.
__device__ __forceinline__ void lora_split_fragment(const float v[8], uint32_t hi[4], uint32_t lo[4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float h0 = __bfloat162float(__float2bfloat16_rn(v[2 * j]));
    const float h1 = __bfloat162float(__float2bfloat16_rn(v[2 * j + 1]));
    hi[j] = pack_bf16x2(h0, h1);
    lo[j] = pack_bf16x2(v[2 * j] - h0, v[2 * j + 1] - h1);
  }
}

// Expand's products for a warp's kTiles MMA tiles of 8 outputs from col0
// (up to `end`): y (loaded as old_*) += t Bᵀ over `ksteps` k-steps, for
// rows g (ya, where act_a) and g + 8 (yb, where act_b).
template <int kTiles, int kSteps>
__device__ __forceinline__ void lora_expand_tiles(const uint32_t (&hi)[kSteps][4], const uint32_t (&lo)[kSteps][4],
                                                  const uint32_t (&bf)[kSteps][kTiles][2], int ksteps,
                                                  const float2 (&old_a)[kTiles], const float2 (&old_b)[kTiles],
                                                  float* ya, float* yb, bool act_a, bool act_b, int col0, int end,
                                                  int tq) {
#pragma unroll
  for (int nt = 0; nt < kTiles; ++nt) {
    if (col0 + nt * 8 >= end) break;
    float acc[4] = {};
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
      if (ks >= ksteps) break;
      mma(acc, hi[ks], bf[ks][nt]);
      mma(acc, lo[ks], bf[ks][nt]);
    }
    const int o = col0 + nt * 8 + 2 * tq;
    if (act_a) *reinterpret_cast<float2*>(ya + o) = make_float2(old_a[nt].x + acc[0], old_a[nt].y + acc[1]);
    if (act_b) *reinterpret_cast<float2*>(yb + o) = make_float2(old_b[nt].x + acc[2], old_b[nt].y + acc[3]);
  }
}

// The tile's rows and adapters, and the columns of the pass being done.
struct LoraTile {
  int sources[16];      // the rows of x and y the tile's rows are
  int row_adapter[16];  // each row's adapter slot, -1: none or not usable here
  int row_u[16];        // each row's index among the distinct adapters, -1: none
  int count;            // distinct adapters
  // Per distinct adapter (per row while planning): tables, rank, scale.
  const Bf16Bits* a[16];
  const Bf16Bits* b[16];
  int rank[16];
  float scale[16];
  float factor[16];       // each row's input norm (LoraInputNorm), else 1
  int col_u[kLoraChunk];  // a pass's column c: its adapter (-1 past the pass's columns)
  int col_r[kLoraChunk];  // and the rank index within it
};

// Row i's source row and adapter (threads 0..15, one row each), then the
// distinct adapters in order of first appearance (thread 0, from shared
// memory). Every block of the cluster finds the same.
__device__ __forceinline__ void plan_lora_row(LoraTile& tile, int i, const Bf16Bits* const* a_table,
                                              const Bf16Bits* const* b_table, const int32_t* ranks,
                                              const float* scales, const int32_t* row_adapter,
                                              const int32_t* row_order, int row0, int n) {
  const int row = row0 + i;
  const int r = row < n ? (row_order ? row_order[row] : row) : n - 1;
  tile.sources[i] = r;
  const int adapter = row < n ? row_adapter[r] : -1;
  const Bf16Bits* a = adapter >= 0 ? a_table[adapter] : nullptr;
  const Bf16Bits* b = adapter >= 0 ? b_table[adapter] : nullptr;
  const int rank = adapter >= 0 ? ranks[adapter] : 0;
  const bool usable = a && b && rank > 0 && rank <= kLoraChunk;
  tile.row_adapter[i] = usable ? adapter : -1;
  tile.a[i] = a, tile.b[i] = b, tile.rank[i] = rank;
  tile.scale[i] = usable ? scales[adapter] : 0.0f;
}

// The distinct adapters among the rows, in order of first appearance, on
// lanes 0..31 of one warp (lane i < 16: row i): each row finds the first row
// of its adapter, a ballot numbers the first rows, and the first rows move
// their adapter's values down to that number.
__device__ __forceinline__ void dedupe_lora_adapters(LoraTile& tile, int lane) {
  const int i = lane < 16 ? lane : 0;
  const int adapter = lane < 16 ? tile.row_adapter[i] : -1;
  int first = i;
  if (adapter >= 0) {
    for (int j = 0; j < i; ++j) {
      if (tile.row_adapter[j] == adapter) {
        first = j;
        break;
      }
    }
  }
  const bool is_first = adapter >= 0 && first == i;
  const unsigned firsts = __ballot_sync(0xffffffffu, is_first);
  const Bf16Bits* a = tile.a[i];
  const Bf16Bits* b = tile.b[i];
  const int rank = tile.rank[i];
  const float scale = tile.scale[i];
  __syncwarp();  // every lane has read its row's values before any is overwritten
  if (is_first) {
    const int u = __popc(firsts & ((1u << i) - 1u));
    tile.a[u] = a, tile.b[u] = b, tile.rank[u] = rank, tile.scale[u] = scale;
  }
  if (lane < 16) tile.row_u[i] = adapter >= 0 ? __popc(firsts & ((1u << first) - 1u)) : -1;
  if (lane == 0) tile.count = __popc(firsts);
}

// B at column `col` of a pass for output o: its adapter's B[o, rank index].
__device__ __forceinline__ uint32_t lora_b_value(const LoraTile& tile, int col, int o) {
  const int u = tile.col_u[col];
  return __ldg(tile.b[u] + static_cast<size_t>(o) * tile.rank[u] + tile.col_r[col]);
}

__global__ void __launch_bounds__(32 * kLoraWarps, 2)
    lora_rows_kernel(float* y, int y_stride, const Bf16Bits* x, const Bf16Bits* const* a, const Bf16Bits* const* b,
                     const int32_t* ranks, const float* scales, const int32_t* row_adapter, const int32_t* row_order,
                     int n, int in, size_t table_stride, LoraTargets targets, LoraInputNorm norm, int tile_rows,
                     int cluster_blocks) {
  namespace cg = cooperative_groups;
  __shared__ LoraTile tile;
  __shared__ float partial[kLoraWarps][16][kLoraChunk];  // the warps' sums over their columns of x
  __shared__ float share[16][kLoraChunk];                // this block's share of t, which its peers read
  __shared__ float t[16][kLoraChunk];                    // the rows' whole t
  const int block = static_cast<int>(blockIdx.x) % cluster_blocks;
  const int row0 = static_cast<int>(blockIdx.x) / cluster_blocks * tile_rows, z = static_cast<int>(blockIdx.z);
  // A tile of 8 rows leaves the MMA's rows 8..15 empty: rows past its end count as past n.
  n = min(n, row0 + tile_rows);
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane / 4, tq = lane % 4;
  if (threadIdx.x < 16) {
    plan_lora_row(tile, static_cast<int>(threadIdx.x), a + z * table_stride, b + z * table_stride, ranks, scales,
                  row_adapter, row_order, row0, n);
  }
  __syncthreads();
  if (threadIdx.x < 32) dedupe_lora_adapters(tile, static_cast<int>(threadIdx.x));
  __syncthreads();
  const int count = tile.count;
  // This block's columns of x and outputs of the target.
  const int slice = (in + 16 * cluster_blocks - 1) / (16 * cluster_blocks) * 16;
  const int k_begin = min(in, block * slice), k_end = min(in, k_begin + slice);
  const int width = targets.width[z];
  const int per = (width + 8 * cluster_blocks - 1) / (8 * cluster_blocks) * 8;
  const int o_begin = min(width, block * per), o_end = min(width, o_begin + per);
  // The adapters' slices this block reads, into L2 while the predecessor runs.
  for (int u = 0; u < count; ++u) {
    const int lines_a = (k_end - k_begin + 63) / 64;  // 128-byte lines of a row's slice
    for (int i = static_cast<int>(threadIdx.x); i < tile.rank[u] * lines_a; i += blockDim.x)
      prefetch_l2(tile.a[u] + static_cast<size_t>(i / lines_a) * in + k_begin + 64 * (i % lines_a));
    const size_t b_first = static_cast<size_t>(o_begin) * tile.rank[u];
    const int lines_b = static_cast<int>((static_cast<size_t>(o_end - o_begin) * tile.rank[u] + 63) / 64);
    for (int i = static_cast<int>(threadIdx.x); i < lines_b; i += blockDim.x) prefetch_l2(tile.b[u] + b_first + 64 * i);
  }
  begin_dependent();
  if (count == 0) return;  // the whole cluster: its blocks planned the same rows
  if (threadIdx.x < 16) {
    // The input's RMSNorm (the predecessor's sums), summed as the projection sums them.
    const int chunks = in / kNormChunk;
    tile.factor[threadIdx.x] =
        norm.sumsq ? folded_norm_scale(norm.sumsq + static_cast<size_t>(tile.sources[threadIdx.x]) * chunks, chunks,
                                       in, norm.eps)
                   : 1.0f;
  }

  const Bf16Bits* xa = x + static_cast<size_t>(tile.sources[g]) * in;
  const Bf16Bits* xb = x + static_cast<size_t>(tile.sources[g + 8]) * in;
  const bool a_in = row0 + g < n, b_in = row0 + g + 8 < n;
  cg::cluster_group cluster = cg::this_cluster();
  for (int u0 = 0, u1 = 0; u0 < count; u0 = u1) {
    // This pass: adapters [u0, u1), their ranks side by side.
    int cols = 0;
    bool pairs = true;  // every rank even: a column pair is one adapter's
    while (u1 < count && cols + tile.rank[u1] <= kLoraChunk) pairs = pairs && tile.rank[u1] % 2 == 0, cols += tile.rank[u1++];
    __syncthreads();  // the last pass's columns and sums are used
    if (threadIdx.x < kLoraChunk) {
      const int c = static_cast<int>(threadIdx.x);
      int u = -1, r = 0;
      for (int v = u0, start = 0; v < u1; start += tile.rank[v++]) {
        if (c < start + tile.rank[v]) {
          u = v, r = c - start;
          break;
        }
      }
      tile.col_u[c] = u, tile.col_r[c] = r;
    }
    __syncthreads();

    // Shrink: t[row][c] over this block's columns of x, k-steps of 16
    // dealt to the warps in turn, kLoraShrinkSteps of them loaded at once.
    const int ntiles = (cols + 7) / 8;
    const Bf16Bits* a_row[kLoraChunk / 8];
#pragma unroll
    for (int nt = 0; nt < kLoraChunk / 8; ++nt) {
      const int u = tile.col_u[nt * 8 + g];
      a_row[nt] = u >= 0 ? tile.a[u] + static_cast<size_t>(tile.col_r[nt * 8 + g]) * in : nullptr;
    }
    float c[kLoraChunk / 8][4] = {};
    for (int k0 = k_begin + warp * 16; k0 < k_end; k0 += 16 * kLoraWarps * kLoraShrinkSteps) {
      uint32_t xf[kLoraShrinkSteps][4], bf[kLoraShrinkSteps][kLoraChunk / 8][2];
#pragma unroll
      for (int s = 0; s < kLoraShrinkSteps; ++s) {
        const int k = k0 + s * 16 * kLoraWarps + 2 * tq;
        xf[s][0] = a_in ? lora_bf16_pair(xa, k, k_end, true) : 0u;
        xf[s][1] = b_in ? lora_bf16_pair(xb, k, k_end, true) : 0u;
        xf[s][2] = a_in ? lora_bf16_pair(xa, k + 8, k_end, true) : 0u;
        xf[s][3] = b_in ? lora_bf16_pair(xb, k + 8, k_end, true) : 0u;
#pragma unroll
        for (int nt = 0; nt < kLoraChunk / 8; ++nt) {
          const bool live = nt < ntiles && a_row[nt];
          bf[s][nt][0] = live ? lora_bf16_pair(a_row[nt], k, k_end, true) : 0u;
          bf[s][nt][1] = live ? lora_bf16_pair(a_row[nt], k + 8, k_end, true) : 0u;
        }
      }
#pragma unroll
      for (int s = 0; s < kLoraShrinkSteps; ++s) {
        if (k0 + s * 16 * kLoraWarps >= k_end) break;
#pragma unroll
        for (int nt = 0; nt < kLoraChunk / 8; ++nt) {
          if (nt < ntiles) mma(c[nt], xf[s], bf[s][nt]);
        }
      }
    }
#pragma unroll
    for (int nt = 0; nt < kLoraChunk / 8; ++nt) {
      if (nt >= ntiles) break;
      partial[warp][g][nt * 8 + 2 * tq] = c[nt][0], partial[warp][g][nt * 8 + 2 * tq + 1] = c[nt][1];
      partial[warp][g + 8][nt * 8 + 2 * tq] = c[nt][2], partial[warp][g + 8][nt * 8 + 2 * tq + 1] = c[nt][3];
    }
    __syncthreads();
    for (int e = static_cast<int>(threadIdx.x); e < 16 * kLoraChunk; e += blockDim.x) {
      const int r = e / kLoraChunk, col = e % kLoraChunk;
      if (col >= cols) continue;
      float sum = 0.0f;
      if (tile.row_u[r] == tile.col_u[col]) {
#pragma unroll
        for (int v = 0; v < kLoraWarps; ++v) sum += partial[v][r][col];
      }
      share[r][col] = sum;
    }

    // The rows' whole t: the cluster's shares in block order.
    cluster.sync();
    for (int e = static_cast<int>(threadIdx.x); e < 16 * kLoraChunk; e += blockDim.x) {
      if (e % kLoraChunk >= cols) continue;
      float sum = 0.0f;
      for (int q = 0; q < cluster_blocks; ++q) sum += cluster.map_shared_rank(&share[0][0], q)[e];
      t[e / kLoraChunk][e % kLoraChunk] = sum;
    }
    cluster.sync();  // t complete; no block overwrites or leaves while a peer reads its share

    // Expand this block's outputs (widths are multiples of 8: an MMA's 8
    // columns are in or out whole). This lane's A fragments: rows g and
    // g + 8, columns k, k + 1, k + 8, k + 9 of each k-step, scaled.
    const int ua = tile.row_u[g], ub = tile.row_u[g + 8];
    const bool act_a = ua >= u0 && ua < u1, act_b = ub >= u0 && ub < u1;
    const int ksteps = (cols + 15) / 16;
    uint32_t hi[kLoraChunk / 16][4], lo[kLoraChunk / 16][4];
#pragma unroll
    for (int ks = 0; ks < kLoraChunk / 16; ++ks) {
      float v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int col = ks * 16 + 2 * tq + (j & 1) + (j >= 4 ? 8 : 0);
        const bool upper = (j >> 1) & 1;  // row g + 8
        const int u = upper ? ub : ua;
        v[j] = ks < ksteps && col < cols && (upper ? act_b : act_a) && tile.col_u[col] == u
                   ? tile.scale[u] * (tile.factor[upper ? g + 8 : g] * t[upper ? g + 8 : g][col])
                   : 0.0f;
      }
      lora_split_fragment(v, hi[ks], lo[ks]);
    }
    float* ya = y + static_cast<size_t>(tile.sources[g]) * y_stride + targets.column[z];
    float* yb = y + static_cast<size_t>(tile.sources[g + 8]) * y_stride + targets.column[z];
    // B at columns (col, col + 1) of the pass for output o, as one operand
    // register: one load where every rank is even (a pair is one adapter's).
    auto b_at = [&](int col, int o) -> uint32_t {
      if (col >= cols) return 0u;
      if (pairs) {
        const int u = tile.col_u[col];
        return __ldg(reinterpret_cast<const uint32_t*>(tile.b[u] + static_cast<size_t>(o) * tile.rank[u] +
                                                         tile.col_r[col]));
      }
      return lora_b_value(tile, col, o) | (col + 1 < cols ? lora_b_value(tile, col + 1, o) << 16 : 0u);
    };
    for (int col0 = o_begin + warp * kLoraWarpOutputs; col0 < o_end; col0 += kLoraWarps * kLoraWarpOutputs) {
      constexpr int kTiles = kLoraWarpOutputs / 8;
      float2 old_a[kTiles], old_b[kTiles];
      uint32_t bf[kLoraChunk / 16][kTiles][2];
#pragma unroll
      for (int nt = 0; nt < kTiles; ++nt) {
        const int o = col0 + nt * 8 + 2 * tq;
        const bool live = col0 + nt * 8 < o_end;
        old_a[nt] = live && act_a ? *reinterpret_cast<const float2*>(ya + o) : make_float2(0.0f, 0.0f);
        old_b[nt] = live && act_b ? *reinterpret_cast<const float2*>(yb + o) : make_float2(0.0f, 0.0f);
#pragma unroll
        for (int ks = 0; ks < kLoraChunk / 16; ++ks) {
          const bool load = live && ks < ksteps;
          bf[ks][nt][0] = load ? b_at(ks * 16 + 2 * tq, col0 + nt * 8 + g) : 0u;
          bf[ks][nt][1] = load ? b_at(ks * 16 + 2 * tq + 8, col0 + nt * 8 + g) : 0u;
        }
      }
      lora_expand_tiles(hi, lo, bf, ksteps, old_a, old_b, ya, yb, act_a, act_b, col0, o_end, tq);
    }
  }
}

// The launch's shape: rows a tile and blocks a cluster. Measured on an H100
// (bench/RESULTS.md, 2026-12-07, lora_rows_bench at 16 and 64 rows over 8
// adapters): up to 64 rows, tiles of 8 rows beat 16 at every width (a tile
// then holds one adapter of rows sorted by adapter, and twice the clusters
// share the work); more rows (prompts) fill the GPU with tiles of 16;
// 16-block clusters halve a block's share of K or of the outputs, which
// pays where the projection is wide (in or a target of 8,192 or more) and
// the launch's blocks fit one to a multiprocessor, and costs elsewhere.
// COHORT_LORA_TILE_ROWS (8 or 16) and COHORT_LORA_CLUSTER (8 or 16) fix
// either for measuring.
struct LoraLaunchShape {
  int tile_rows = 16;
  int cluster_blocks = kLoraClusterBlocks;
};

inline LoraLaunchShape lora_launch_shape(int n, int in, const LoraTargets& targets) {
  struct Settings {
    int tile_rows = 0, cluster_blocks = 0;  // 0: chosen per launch
    int multiprocessors = 0;
  };
  static const Settings settings = [] {
    Settings s;
    // 8 or 16, 0 when unset; anything else stops the process naming the variable.
    auto eight_or_sixteen = [](EnvKnob knob) {
      const char* v = read_env_knob(knob);
      if (!v) return 0;
      const std::string text(v);
      COHORT_CHECK_MSG(text == "8" || text == "16", "{}={}: 8 or 16", env_knob_name(knob), text);
      return std::atoi(v);
    };
    s.tile_rows = eight_or_sixteen(EnvKnob::kLoraTileRows);
    s.cluster_blocks = eight_or_sixteen(EnvKnob::kLoraCluster);
    int device = 0;
    COHORT_CUDA_CHECK_FATAL(cudaGetDevice(&device));
    COHORT_CUDA_CHECK_FATAL(cudaDeviceGetAttribute(&s.multiprocessors, cudaDevAttrMultiProcessorCount, device));
    COHORT_CUDA_CHECK_FATAL(cudaFuncSetAttribute(lora_rows_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    return s;
  }();
  LoraLaunchShape shape;
  shape.tile_rows = settings.tile_rows ? settings.tile_rows : n <= 64 ? 8 : 16;
  if (settings.cluster_blocks) {
    shape.cluster_blocks = settings.cluster_blocks;
    return shape;
  }
  int widest = in;
  for (int z = 0; z < targets.count; ++z) widest = std::max(widest, targets.width[z]);
  const long blocks_at_16 = long((n + shape.tile_rows - 1) / shape.tile_rows) * 16 * targets.count;
  if (widest >= 8192 && blocks_at_16 <= settings.multiprocessors) shape.cluster_blocks = 16;
  return shape;
}

void lora_rows_bf16(float* y, int y_stride, const Bf16Bits* x, const Bf16Bits* const* a, const Bf16Bits* const* b,
                    const int32_t* ranks, const float* scales, const int32_t* row_adapter, const int32_t* row_order,
                    int n, int in, const LoraTargets& targets, CUstream_st* stream, const LoraInputNorm& norm) {
  if (n <= 0) return;
  const LoraLaunchShape shape = lora_launch_shape(n, in, targets);
  const dim3 grid((n + shape.tile_rows - 1) / shape.tile_rows * shape.cluster_blocks, 1, targets.count);
  COHORT_CUDA_CHECK_FATAL(launch_dependent_in_clusters(
      lora_rows_kernel, grid, shape.cluster_blocks, 32 * kLoraWarps, 0, stream, y, y_stride, x, a, b, ranks, scales,
      row_adapter, row_order, n, in, targets.table_stride, targets, norm, shape.tile_rows, shape.cluster_blocks));
}

void lora_rows_bf16(float* y, int y_stride, const Bf16Bits* x, const Bf16Bits* const* a, const Bf16Bits* const* b,
                    const int32_t* ranks, const float* scales, const int32_t* row_adapter, const int32_t* row_order,
                    int n, int in, int out, CUstream_st* stream, const LoraInputNorm& norm) {
  LoraTargets one;
  one.width[0] = out;
  lora_rows_bf16(y, y_stride, x, a, b, ranks, scales, row_adapter, row_order, n, in, one, stream, norm);
}

}  // namespace cohort::models::cuda
