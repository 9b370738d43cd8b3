// CUDA tensor-core projections for decode steps of 9 to 64 rows, behind
// skinny_gemm_bf16 / skinny_gemm_swiglu_bf16 (contract: gemv.h; CPU
// reference: gemv.cc).
//
// At these rows a projection still reads each weight once, so it is bound by
// the weight stream, but x is no longer small: 64 rows of a 1,024-wide input
// are 128 KB. The skinny kernel (skinny_gemm.cuh) gives each block 16 weight
// rows and has every block read all of x from L2, four times the weights'
// bytes at 64 rows; cuBLASLt's tiles leave most multiprocessors idle at these
// shapes. Here a block takes 64 or 128 weight rows against all the step's
// rows, both staged through shared memory:
//
//  * x [rows, K] is the MMA's A operand (16-row tiles), w [out, K] its B
//    operand (8-row tiles); both are K-contiguous, so ldmatrix feeds both
//    from the same swizzled 128-byte rows (16-byte piece c of row r at
//    c ^ (r mod 8): the eight rows an ldmatrix reads hit eight different
//    bank groups).
//  * Four stages of 64 K-columns are in flight through cp.async. The weight
//    pieces of the first stages are issued before the wait on the
//    predecessor kernel (weights are no kernel's output), x's after it.
//  * K is split over the blocks of a thread-block cluster (up to 8) so that
//    the grid fills the machine. Each block leaves its fp32 tile in its own
//    shared memory; after a cluster barrier, block q of the cluster adds
//    rows [q·R/s, (q+1)·R/s) of every block's tile, in block order, and
//    writes them through the epilogue. The order is fixed, so results are
//    deterministic, and no global scratch or second kernel is involved.
//  * Epilogues: store, add into y (the residual stream takes an output
//    projection in place), or SwiGLU. For SwiGLU the block's weight rows
//    alternate eight gate rows and their eight up rows, so each 16-column
//    group of the tile holds both halves of eight outputs.
//  * A folded RMSNorm (FoldedNorm, gemv.h): a store or SwiGLU scales each
//    row of sums by the norm of its input, from the chunk sums its
//    producer left; an add into y also writes bf16(y * w) for the next
//    projection and the sums of squares of y's 64-column chunks (the 16
//    lanes holding a chunk add theirs in a fixed order).
//
// The engine measures, per decode bucket, whether these or cuBLASLt serve a
// step (cuda_graph_warmup.cc). On an H200 these win at 16 to 32 rows (a
// Qwen3-0.6B step: 985 against 1,257 us at 16 rows); at 48 and 64 rows
// cuBLASLt's kernels do (1,227 against 1,330 us at 64), whose per-block
// stream keeps more of HBM busy than mma.sync tiles with a cp.async pipeline
// (bench/RESULTS.md).
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include "models/cuda/common.cuh"
#include "models/ops/gemv.h"

namespace cohort::models::cuda {

constexpr int kTileK = 64;  // K columns a stage holds: one 128-byte row of bf16
constexpr int kTileStages = 4;
constexpr int kTileWarps = 8;  // 2 over the rows x 4 over the weight rows
constexpr int kTileMaxSplits = 8;  // the portable cluster size
constexpr int kTileMinRows = kGemvMaxRows + 1;

enum class TileEpilogue { kStore, kAccumulate, kSwiglu };

struct TileArgs {
  float* y;           // kStore / kAccumulate: [n, out] fp32
  Bf16Bits* h;        // kSwiglu: [n, out] bf16
  const Bf16Bits* x;  // [n, in]
  const Bf16Bits* w;  // [out, in], or for SwiGLU [2 out, in] (gate rows, then up rows)
  int n, in, out;
  int k_steps;        // kTileK-column stages per block: in / kTileK / splits
  FoldedNorm norm;    // gemv.h: the row scale of a consumer, the outputs of a producer
};

// Byte offset of 16-byte piece `piece` of row `row` in a stage's swizzled
// [rows][kTileK] bf16 tile.
__device__ __forceinline__ uint32_t tile_offset(int row, int piece) {
  return static_cast<uint32_t>(row * (kTileK * 2) + ((piece ^ (row & 7)) << 4));
}

// MT: 16-row x tiles per warp (the block covers 32 MT rows); BN: weight rows
// per block (64 or 128).
template <int MT, int BN>
struct TileShape {
  static constexpr int kRows = 32 * MT;
  static constexpr int kWarpCols = BN / 4;      // weight rows per warp
  static constexpr int kColTiles = kWarpCols / 8;  // 8-wide MMA tiles per warp
  static constexpr int kStageBytes = (kRows + BN) * kTileK * 2;
  static constexpr int kTileLd = BN + 8;        // fp32 sums, padded rows
  static constexpr int kSmem = kTileStages * kStageBytes;
  static_assert(kRows * kTileLd * 4 <= kSmem, "the sums reuse the stages' memory");
};

template <int MT, int BN, TileEpilogue kEpilogue>
__global__ void __launch_bounds__(32 * kTileWarps) tile_gemm_kernel(TileArgs a) {
  using S = TileShape<MT, BN>;
  namespace cg = cooperative_groups;
  extern __shared__ __align__(128) unsigned char tile_smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int split = blockIdx.x, splits = gridDim.x, tile = blockIdx.z;
  // Row block y takes rows [y kRows, (y + 1) kRows): x, y and h start there.
  // The row blocks of a tile launch side by side, so that all but the first
  // find its weights in L2.
  const int row0 = blockIdx.y * S::kRows, rows = min(a.n - row0, S::kRows);
  const Bf16Bits* x_rows = a.x + static_cast<size_t>(row0) * a.in;
  const int k_first = split * a.k_steps;
  constexpr bool kSwiglu = kEpilogue == TileEpilogue::kSwiglu;

  // This thread's share of a stage's loads: x pieces [rows x 8], weight
  // pieces [BN x 8], 256 threads.
  auto load_w = [&](int step, int stage) {
    const uint32_t base = shared_address(tile_smem + stage * S::kStageBytes + S::kRows * kTileK * 2);
    const int k = (k_first + step) * kTileK;
#pragma unroll
    for (int i = 0; i < BN * 8 / (32 * kTileWarps); ++i) {
      const int item = tid + i * 32 * kTileWarps, row = item >> 3, piece = item & 7;
      int w_row;
      if constexpr (kSwiglu) {  // groups of 8 gate rows, then their 8 up rows
        const int f = tile * (BN / 2) + (row >> 4) * 8 + (row & 7);
        w_row = (row & 8) ? a.out + f : f;
      } else {
        w_row = tile * BN + row;
      }
      cp_async16(base + tile_offset(row, piece), a.w + static_cast<size_t>(w_row) * a.in + k + piece * 8,
                 true);
    }
  };
  auto load_x = [&](int step, int stage) {
    const uint32_t base = shared_address(tile_smem + stage * S::kStageBytes);
    const int k = (k_first + step) * kTileK;
#pragma unroll
    for (int i = 0; i < (S::kRows * 8 + 32 * kTileWarps - 1) / (32 * kTileWarps); ++i) {
      const int item = tid + i * 32 * kTileWarps, row = item >> 3, piece = item & 7;
      if (row >= S::kRows) break;
      const bool live = row < rows;
      cp_async16(base + tile_offset(row, piece),
                 x_rows + static_cast<size_t>(live ? row : 0) * a.in + k + piece * 8, live);
    }
  };

  // Weights first, then the wait on the predecessor, then x.
#pragma unroll
  for (int s = 0; s < kTileStages - 1; ++s) {
    if (s < a.k_steps) load_w(s, s);
  }
  begin_dependent();
#pragma unroll
  for (int s = 0; s < kTileStages - 1; ++s) {
    if (s < a.k_steps) load_x(s, s);
    cp_async_commit();
  }

  const int wm = warp >> 2, wn = warp & 3;  // warp's row half and weight-row quarter
  float acc[MT][S::kColTiles][4];
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int j = 0; j < S::kColTiles; ++j) acc[m][j][0] = acc[m][j][1] = acc[m][j][2] = acc[m][j][3] = 0.0f;
  }
  for (int step = 0; step < a.k_steps; ++step) {
    cp_async_wait<kTileStages - 2>();
    __syncthreads();  // stage `step` landed for every thread; step - 1's buffer is free
    const int next = step + kTileStages - 1;
    if (next < a.k_steps) {
      load_w(next, next % kTileStages);
      load_x(next, next % kTileStages);
    }
    cp_async_commit();
    const uint32_t xs = shared_address(tile_smem + (step % kTileStages) * S::kStageBytes);
    const uint32_t ws = xs + S::kRows * kTileK * 2;
#pragma unroll
    for (int kk = 0; kk < kTileK / 16; ++kk) {
      uint32_t af[MT][4];
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        const int row = wm * 16 * MT + m * 16 + (lane & 15);
        ldmatrix_x4(af[m], xs + tile_offset(row, kk * 2 + (lane >> 4)));
      }
#pragma unroll
      for (int j = 0; j < S::kColTiles; j += 2) {
        uint32_t bf[4];
        const int row = wn * S::kWarpCols + j * 8 + (lane & 7) + ((lane >> 4) << 3);
        ldmatrix_x4(bf, ws + tile_offset(row, kk * 2 + ((lane >> 3) & 1)));
        const uint32_t b0[2] = {bf[0], bf[1]}, b1[2] = {bf[2], bf[3]};
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          mma(acc[m][j], af[m], b0);
          mma(acc[m][j + 1], af[m], b1);
        }
      }
    }
  }
  if (a.k_steps == 0) begin_dependent();
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the stages: they become the sums

  // This block's sums as an fp32 [rows][BN] tile, in its own shared memory.
  float* sums = reinterpret_cast<float*>(tile_smem);
  {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int j = 0; j < S::kColTiles; ++j) {
        const int row = wm * 16 * MT + m * 16 + g, col = wn * S::kWarpCols + j * 8 + 2 * t;
        *reinterpret_cast<float2*>(sums + row * S::kTileLd + col) = make_float2(acc[m][j][0], acc[m][j][1]);
        *reinterpret_cast<float2*>(sums + (row + 8) * S::kTileLd + col) =
            make_float2(acc[m][j][2], acc[m][j][3]);
      }
    }
  }
  cg::cluster_group cluster = cg::this_cluster();
  // Block `split` finishes rows [r0, r1) of the tile, adding the blocks'
  // sums in block order: units of 4 outputs, all peers' loads in flight at
  // once. For SwiGLU a unit is group u / 2 of 8 outputs, half u % 2: gate at
  // column 16 (u / 2) + 4 (u % 2), up 8 columns on.
  constexpr int kUnits = kSwiglu ? BN / 8 : BN / 4;
  const int per = S::kRows / splits;
  const int r0 = split * per, r1 = min(r0 + per, rows);
  const int items = (r1 - r0) * kUnits;
  auto column = [](int u) { return kSwiglu ? (u >> 1) * 16 + (u & 1) * 4 : u * 4; };
  auto output_at = [&](int item) {
    return static_cast<size_t>(row0 + r0 + item / kUnits) * a.out +
           (kSwiglu ? tile * (BN / 2) + (item % kUnits >> 1) * 8 + (item % kUnits & 1) * 4
                    : tile * BN + (item % kUnits) * 4);
  };
  // The residual this thread's first unit adds to, read while the cluster
  // meets: no other block writes it, and its readers finished before the
  // wait on the predecessor.
  float4 first_old = make_float4(0, 0, 0, 0);
  if (kEpilogue == TileEpilogue::kAccumulate && tid < items) {
    first_old = *reinterpret_cast<const float4*>(a.y + output_at(tid));
  }
  cluster.sync();  // every block of the cluster has its sums in place
  const float* peers[kTileMaxSplits];
#pragma unroll
  for (int q = 0; q < kTileMaxSplits; ++q) peers[q] = cluster.map_shared_rank(sums, q < splits ? q : 0);
  auto add4 = [](float4& s, const float4& v) { s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w; };
  auto scale4 = [](float4& s, float f) { s.x *= f, s.y *= f, s.z *= f, s.w *= f; };
  auto store4_bf16 = [](Bf16Bits* p, const float4& v) {
    *reinterpret_cast<uint2*>(p) = make_uint2(pack_bf16x2(v.x, v.y), pack_bf16x2(v.z, v.w));
  };
  // Whole warps a pass, so that a producer's sums of squares (16 lanes a
  // 64-column chunk of a row) see every lane; lanes past the items add 0.
  const int passes = (items + 32 * kTileWarps - 1) / (32 * kTileWarps);
  for (int pass = 0; pass < passes; ++pass) {
    const int item = tid + pass * 32 * kTileWarps;
    const bool live = item < items;
    const int row = row0 + r0 + item / kUnits;
    float4 gate = make_float4(0, 0, 0, 0), up = gate;
    size_t at = 0;
    if (live) {
      const int off = (r0 + item / kUnits) * S::kTileLd + column(item % kUnits);
      float4 lo[kTileMaxSplits], hi[kTileMaxSplits];
#pragma unroll
      for (int q = 0; q < kTileMaxSplits; ++q) {
        if (q < splits) {
          lo[q] = *reinterpret_cast<const float4*>(peers[q] + off);
          hi[q] = kSwiglu ? *reinterpret_cast<const float4*>(peers[q] + off + 8) : make_float4(0, 0, 0, 0);
        }
      }
      gate = lo[0], up = hi[0];
#pragma unroll
      for (int q = 1; q < kTileMaxSplits; ++q) {
        if (q < splits) {
          add4(gate, lo[q]);
          if constexpr (kSwiglu) add4(up, hi[q]);
        }
      }
      if (a.norm.in_sumsq) {  // the input's RMSNorm, as a scale of the row's sums
        const int chunks = a.in / kNormChunk;
        const float scale =
            folded_norm_scale(a.norm.in_sumsq + static_cast<size_t>(row) * chunks, chunks, a.in, a.norm.eps);
        scale4(gate, scale);
        scale4(up, scale);
      }
      at = output_at(item);
      if constexpr (kSwiglu) {
        auto swiglu = [](float g, float u) { return g / (1.0f + __expf(-g)) * u; };
        store4_bf16(a.h + at, make_float4(swiglu(gate.x, up.x), swiglu(gate.y, up.y),
                                          swiglu(gate.z, up.z), swiglu(gate.w, up.w)));
      } else {
        if constexpr (kEpilogue == TileEpilogue::kAccumulate) {
          add4(gate, item == tid ? first_old : *reinterpret_cast<const float4*>(a.y + at));
        }
        *reinterpret_cast<float4*>(a.y + at) = gate;
      }
    }
    if (kEpilogue == TileEpilogue::kAccumulate && a.norm.out_x) {
      // The next RMSNorm's input, bf16(x * w), and the sums of squares of
      // this 64-column chunk of the row (16 lanes, in a fixed order).
      float ss = gate.x * gate.x + gate.y * gate.y + gate.z * gate.z + gate.w * gate.w;
      for (int o = 8; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
      if (live) {
        const int col = static_cast<int>(at % a.out);
        const float4 w = *reinterpret_cast<const float4*>(a.norm.out_weight + col);
        store4_bf16(a.norm.out_x + at, make_float4(gate.x * w.x, gate.y * w.y, gate.z * w.z, gate.w * w.w));
        if ((item & 15) == 0) {
          a.norm.out_sumsq[static_cast<size_t>(row) * (a.out / kNormChunk) + col / kNormChunk] = ss;
        }
      }
    }
  }
  cluster.sync();  // no block leaves while a peer may still read its sums
}

// Blocks of 32 rows (past 32 rows, two of them side by side per weight
// tile: one 64-row block spends as long on its MMAs as on its loads); 128
// weight rows a block unless even the largest split would leave
// multiprocessors idle; then the most splits that keep the grid within 1.5
// blocks a multiprocessor, 2 for two row blocks of 64 weight rows (each K
// range whole stages). Measured on an H200 (projection_bench, bench/RESULTS.md): a
// second full wave of blocks costs more than the longer K ranges it
// shortens, a partial one less than the idle multiprocessors it fills; at
// 64 rows the paired 32-row blocks took 6.0 to 8.7 us a Qwen3-0.6B
// projection where single 64-row blocks took 7.7 to 9.6.
TilePlan tile_plan(int n, int in, int out, bool swiglu, int sms) {
  TilePlan p;
  if (n < kTileMinRows || n > kSkinnyMaxRows || in % kTileK != 0) return p;
  const int per_block = swiglu ? 2 : 1;  // weight rows per output
  p.mt = 1;
  p.row_blocks = (n + 31) / 32;
  for (int bn : {128, 64}) {
    const int outputs = bn / per_block;
    if (out % outputs != 0) continue;
    p.bn = bn, p.tiles = out / outputs;
    if (p.tiles * p.row_blocks * kTileMaxSplits >= sms) break;
  }
  if (p.bn == 0) return p;
  const int k_steps = in / kTileK;
  // Two 48 KiB blocks (64 weight rows, two row blocks) share a
  // multiprocessor well; two of 80 KiB (128 rows) did not (qkv at 64 rows:
  // 7.4 us over 128 blocks, 9.0 over 256).
  const int most = p.row_blocks > 1 && p.bn == 64 ? 4 * sms : 3 * sms;
  p.splits = 1;
  while (p.splits < kTileMaxSplits && 2 * p.tiles * p.row_blocks * (2 * p.splits) <= most &&
         k_steps % (2 * p.splits) == 0) {
    p.splits *= 2;
  }
  return p;
}

template <int MT, int BN, TileEpilogue kEpilogue>
void launch_tile_gemm(const TilePlan& plan, const TileArgs& args, CUstream_st* stream) {
  auto kernel = tile_gemm_kernel<MT, BN, kEpilogue>;
  constexpr int kSmem = TileShape<MT, BN>::kSmem;
  static const bool sized = [&] {
    COHORT_CUDA_CHECK_FATAL(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    return true;
  }();
  (void)sized;
  const dim3 grid(plan.splits, plan.row_blocks, plan.tiles);
  COHORT_CUDA_CHECK_FATAL(launch_dependent_in_clusters(kernel, grid, plan.splits,
                                                       dim3(32 * kTileWarps), kSmem, stream, args));
}

template <TileEpilogue kEpilogue>
void run_tile_gemm(const TilePlan& plan, float* y, Bf16Bits* h, const Bf16Bits* x,
                   const Bf16Bits* w, int n, int in, int out, const FoldedNorm& norm,
                   CUstream_st* stream) {
  const TileArgs args{y, h, x, w, n, in, out, in / kTileK / plan.splits, norm};
  if (plan.mt == 1) {
    if (plan.bn == 128) return launch_tile_gemm<1, 128, kEpilogue>(plan, args, stream);
    return launch_tile_gemm<1, 64, kEpilogue>(plan, args, stream);
  }
  if (plan.bn == 128) return launch_tile_gemm<2, 128, kEpilogue>(plan, args, stream);
  return launch_tile_gemm<2, 64, kEpilogue>(plan, args, stream);
}

bool folded_norm_supported(int n, int in, int out, bool swiglu) {
  return in % kNormChunk == 0 && (swiglu || out % kNormChunk == 0) &&
         tile_plan(n, in, out, swiglu, device_multiprocessors()).bn != 0;
}

void tile_gemm_bf16(const TilePlan& plan, float* y, Bf16Bits* h, const Bf16Bits* x,
                    const Bf16Bits* w, int n, int in, int out, GemvOutput output,
                    CUstream_st* stream, const FoldedNorm& norm) {
  const int outputs = h ? plan.bn / 2 : plan.bn;
  COHORT_CHECK_MSG((plan.bn == 64 || plan.bn == 128) && (plan.mt == 1 || plan.mt == 2) &&
                       plan.row_blocks >= 1 && n >= 1 && n <= 32 * plan.mt * plan.row_blocks &&
                       plan.splits >= 1 &&
                       plan.splits <= kTileMaxSplits && 32 * plan.mt % plan.splits == 0 &&
                       in % (kTileK * plan.splits) == 0 && out == plan.tiles * outputs,
                   "tile plan mt {} bn {} tiles {} splits {} does not fit [{}x{}]x[{}x{}]", plan.mt,
                   plan.bn, plan.tiles, plan.splits, n, in, in, out);
  COHORT_CHECK_MSG(!norm.in_sumsq || in % kNormChunk == 0, "folded norm over {} inputs", in);
  COHORT_CHECK_MSG((!norm.in_sumsq && !norm.out_x) || norm.chunk == kNormChunk,
                   "the tile forms' folded norm sums {}-column chunks, not {}", kNormChunk, norm.chunk);
  COHORT_CHECK_MSG(!norm.out_x || (output == GemvOutput::kAccumulate && !h && out % kNormChunk == 0),
                   "a folded norm's producer adds into the residual ({} outputs)", out);
  if (h) return run_tile_gemm<TileEpilogue::kSwiglu>(plan, nullptr, h, x, w, n, in, out, norm, stream);
  if (output == GemvOutput::kAccumulate) {
    return run_tile_gemm<TileEpilogue::kAccumulate>(plan, y, nullptr, x, w, n, in, out, norm, stream);
  }
  run_tile_gemm<TileEpilogue::kStore>(plan, y, nullptr, x, w, n, in, out, norm, stream);
}

}  // namespace cohort::models::cuda
