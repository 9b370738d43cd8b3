// Decode attention on the tensor cores (mma.sync), for head_dim 64 and 128:
// the same grid, splits, fused q/k/v preparation and result as the lanes
// form (decode_attention.cuh), with the dot products and the weighted sum
// of V done as 16x8x16 tiles instead of lane by lane.
//
// Why: at a few dozen rows and contexts of a few hundred positions the
// lanes form is bound by instructions, not memory (Nsight Compute at 64
// rows: DRAM 20%, one instruction every 8 cycles per warp). A lane group
// spends 8 multiply-adds, 4 shuffles and an unpack per head and position;
// a tile does 16 positions' dot products for every head of the group in
// D / 16 mma instructions.
//
// Each warp takes 16-position tiles of the block's range (tile j of the
// range goes to warp j mod W) and keeps kDecodeTileStages - 1 of its tiles
// in flight (cp.async), each a [16][D] K tile and V tile with 16-byte pieces
// XOR-swizzled by row, so that ldmatrix reads them without bank conflicts.
// The warp's heads are the M rows of the tiles (rows past the group's
// heads are zeros):
//   S [heads x 16 positions] = Q [heads x D] K^T    (K tile read as B)
//   O^T [D x heads] += V^T [D x 16] P^T [16 x heads] (V tile read
//                                       transposed as A; P from S's
//                                       accumulators, as B, unshuffled)
// Lane (g, t) = (lane / 4, lane % 4) holds head g's scores for positions
// 2t, 2t+1, 8+2t, 9+2t of a tile, and O for heads 2t, 2t+1. q is rounded
// to bf16 as the cache is (transformers' q is bf16 too); scores, the online
// softmax and O stay fp32, P is rounded to bf16 for the second product.
#pragma once

#include <cfloat>

#include "models/cuda/common.cuh"
#include "models/ops/decode_attention_state.cuh"
#include "models/ops/decode_qkv.cuh"
#include "models/ops/kv_fp8.cuh"

namespace cohort::models::cuda {

constexpr int kDecodeTilePositions = 16;
// Two tiles a warp in flight while a third is used.
constexpr int kDecodeTileStages = 3;
// Warps a block: two, so that four blocks (of 53 KiB at D = 128) share a
// multiprocessor and a batch of 64 rows x 8 KV heads is one wave.
constexpr int kDecodeTileWarps = 2;

inline bool decode_attention_tiles_support(int head_dim, int heads_per_block) {
  return (head_dim == 64 || head_dim == 128) && heads_per_block <= 8;
}

__host__ __device__ inline size_t decode_tiles_shared_bytes(const DecodeShape& s, int heads,
                                                            bool fused, bool paged) {
  return decode_attention_stage_offset(s, heads, kDecodeTileWarps, fused, paged) +
         sizeof(Bf16Bits) * 2 * kDecodeTileStages * kDecodeTileWarps * kDecodeTilePositions *
             s.head_dim;
}

// Byte offset of 16-byte piece `piece` of row `row` in a [16][D] tile:
// pieces XOR row mod 8, so the 8 rows of an ldmatrix matrix fall in 8
// different bank groups.
template <int D>
__device__ __forceinline__ uint32_t decode_tile_at(int row, int piece) {
  return static_cast<uint32_t>(row * D * 2 + ((piece ^ (row & 7)) << 4));
}

// kFp8: the cache holds e4m3 codes, expanded to bf16 (exactly) as they are
// staged (kv_fp8.cuh).
template <bool kFused, int kHeads, int D, bool kFp8>
__global__ void __launch_bounds__(32 * kDecodeTileWarps)
    decode_attention_tiles_kernel(const float* q, DecodeQkv own, KvView cache, DecodeRows rows,
                                  DecodeShape s, DecodeSplits split, Bf16Bits* y) {
  constexpr int W = kDecodeTileWarps, T = kDecodeTilePositions, kStages = kDecodeTileStages;
  constexpr int kSteps = D / 16;    // k-steps of Q K^T, m-tiles of V^T P^T
  constexpr int kPieces = D / 8;    // 16-byte pieces a position
  constexpr uint32_t kTileBytes = T * D * 2;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const DecodeBlock b = decode_block(rows, s, kHeads, split.splits, T * W);
  const int r = b.r, kv = b.kv, part = b.part, h0 = b.h0, pos = b.pos;
  const int begin = b.range.begin, end = b.range.end, active = b.range.active;
  if (begin > pos) return;  // a split beyond this row's context
  extern __shared__ float shared[];
  const DecodeSharedParts layout = decode_shared_parts(shared, W, kHeads, D, kFused);
  // [warp][stage][K, V] tiles.
  const uint32_t tiles =
      shared_address(shared) +
      static_cast<uint32_t>(decode_attention_stage_offset(s, kHeads, W, kFused, rows.block_table != nullptr)) +
      warp * kStages * 2 * kTileBytes;
  const DecodeCachePlace place = decode_cache_place(rows, s, b.slot, kv, begin, end, layout.table);
  const KvScales kv_scale = kv_scales(cache, s.hkv, kv);  // written before any step: read early
  const int count = (end - begin + T - 1) / T;                  // the block's tiles
  const int mine = count > warp ? (count - warp + W - 1) / W : 0;  // this warp's
  auto tile_base = [&](int k) { return begin + (warp + k * W) * T; };
  // Lane piece i of a tile: its byte offset in the tile, and its element in
  // the cache (valid: a position the tile reads from the cache).
  constexpr int kLanePieces = T * kPieces / 32;
  auto piece_of = [&](int base, int i, uint32_t& tile_at, size_t& at) {
    const int c = lane + 32 * i, row = c / kPieces, piece = c % kPieces, at_t = base + row;
    const bool valid = at_t < end && (!kFused || at_t < pos);
    at = valid ? place.offset(s, kv, at_t) + piece * 8 : 0;
    tile_at = decode_tile_at<D>(row, piece);
    return valid;
  };
  auto issue = [&](int k) {
    if (k < mine) {
      const uint32_t kt = tiles + (k % kStages) * 2 * kTileBytes, vt = kt + kTileBytes;
#pragma unroll
      for (int i = 0; i < kLanePieces; ++i) {
        uint32_t tile_at;
        size_t at;
        const bool valid = piece_of(tile_base(k), i, tile_at, at);
        stage_kv8<kFp8>(kt + tile_at, cache.k, at, valid, kv_scale.k);
        stage_kv8<kFp8>(vt + tile_at, cache.v, at, valid, kv_scale.v);
      }
    }
    cp_async_commit();  // empty past the warp's last tile: the count of groups stays even
  };
  // An fp8 cache's tiles in the loop: codes loaded into registers before a
  // tile's products (in flight while the MMAs run) and stored, expanded,
  // after them, into the stage the tile before used.
  uint2 ahead_k[kLanePieces], ahead_v[kLanePieces];
  auto load_ahead = [&](int k) {
    if (k >= mine) return;
#pragma unroll
    for (int i = 0; i < kLanePieces; ++i) {
      uint32_t tile_at;
      size_t at;
      const bool valid = piece_of(tile_base(k), i, tile_at, at);
      ahead_k[i] = load_kv_codes8(cache.k, at, valid), ahead_v[i] = load_kv_codes8(cache.v, at, valid);
    }
  };
  auto store_ahead = [&](int k) {
    if (k >= mine) return;
    const uint32_t kt = tiles + (k % kStages) * 2 * kTileBytes, vt = kt + kTileBytes;
#pragma unroll
    for (int i = 0; i < kLanePieces; ++i) {
      uint32_t tile_at;
      size_t at;
      piece_of(tile_base(k), i, tile_at, at);
      st_shared16(kt + tile_at, e4m3x8_to_bf16x8(ahead_k[i], kv_scale.k));
      st_shared16(vt + tile_at, e4m3x8_to_bf16x8(ahead_v[i], kv_scale.v));
    }
  };
  DecodeQkvConstants<kHeads> constants;
  if constexpr (kFused) {
    for (int k = 0; k < kStages - 1; ++k) issue(k);
    constants = decode_own_constants<kHeads>(own, rows, s, r, h0, kv);
  }
  begin_dependent();
  if constexpr (kFused) {
    decode_own_qkv<kHeads, kFp8>(own, constants, rows, s, r, h0, kv, part == 0 && blockIdx.z == 0,
                                 layout.q, layout.k, layout.v, cache);
    __syncthreads();
  }
  // Q's A fragments: rows g < kHeads hold head g; rows g + 8 are zeros.
  uint32_t qa[kSteps][2];
#pragma unroll
  for (int j = 0; j < kSteps; ++j) {
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (g < kHeads) {
      const float* qrow = kFused ? layout.q + g * D
                                 : q + (static_cast<size_t>(r) * s.hq + h0 + g) * D;
      const int d = 16 * j + 2 * t;
      v[0] = qrow[d], v[1] = qrow[d + 1], v[2] = qrow[d + 8], v[3] = qrow[d + 9];
    }
    qa[j][0] = pack_bf16x2(v[0], v[1]);
    qa[j][1] = pack_bf16x2(v[2], v[3]);
  }
  if constexpr (!kFused) {
    for (int k = 0; k < kStages - 1; ++k) issue(k);
  }
  const float scale = rsqrtf(static_cast<float>(D));
  float o[kSteps][4] = {};
  float m = -FLT_MAX, l = 0.0f;  // head g's state over this lane's positions
  for (int k = 0; k < mine; ++k) {
    cp_async_wait<kStages - 2>();  // this lane's copies of tile k landed
    __syncwarp();                  // and every lane's, and tile k - 1 is read
    if constexpr (kFp8) {
      load_ahead(k + kStages - 1);  // stored after this tile's products
    } else {
      issue(k + kStages - 1);  // into tile k - 1's stage
    }
    const int base = tile_base(k);
    const uint32_t kt = tiles + (k % kStages) * 2 * kTileBytes, vt = kt + kTileBytes;
    if (kFused && pos - base >= 0 && pos - base < T) {
      // The row's own position, prepared above rather than read back.
      const int piece = lane % kPieces;
      if (lane < 2 * kPieces) {
        const Bf16Bits* own_row = lane < kPieces ? layout.k : layout.v;
        st_shared16((lane < kPieces ? kt : vt) + decode_tile_at<D>(pos - base, piece),
                    reinterpret_cast<const uint4*>(own_row)[piece]);
      }
      __syncwarp();
    }
    // S = Q K^T: two n-tiles of 8 positions. ldmatrix matrix i (lanes 8i to
    // 8i + 7 give its rows) is positions (i / 2) * 8 + row, dims 16 j + (i % 2) * 8.
    float sc[2][4] = {};
    const int mat = lane >> 3, row8 = lane & 7;
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
      uint32_t f[4];
      ldmatrix_x4(f, kt + decode_tile_at<D>((mat >> 1) * 8 + row8, 2 * j + (mat & 1)));
      const uint32_t a[4] = {qa[j][0], 0u, qa[j][1], 0u};
      const uint32_t b0[2] = {f[0], f[1]}, b1[2] = {f[2], f[3]};
      mma(sc[0], a, b0);
      mma(sc[1], a, b1);
    }
    // Online softmax of head g over the tile (positions past the range
    // masked), the four lanes of a head agreeing on its maximum.
    float x[4] = {sc[0][0], sc[0][1], sc[1][0], sc[1][1]};
    float tile_max = -INFINITY;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int at_t = base + (i >> 1) * 8 + 2 * t + (i & 1);
      x[i] = at_t < end ? x[i] * scale : -INFINITY;
      tile_max = fmaxf(tile_max, x[i]);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
    const float M = fmaxf(m, tile_max);  // finite: the tile's first position is in range
    const float corr = __expf(m - M);
    float p[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) p[i] = __expf(x[i] - M);
    l = l * corr + (p[0] + p[1]) + (p[2] + p[3]);
    m = M;
    // O's columns are heads 2t and 2t + 1, whose corrections lanes 8t and
    // 8t + 4 hold.
    const float c0 = __shfl_sync(0xffffffffu, corr, 8 * t);
    const float c1 = __shfl_sync(0xffffffffu, corr, 8 * t + 4);
    const uint32_t pb[2] = {pack_bf16x2(p[0], p[1]), pack_bf16x2(p[2], p[3])};
    // O^T += V^T P^T: matrix i is positions (i / 2) * 8 + row, dims
    // 16 j + (i % 2) * 8, transposed.
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
      o[j][0] *= c0, o[j][1] *= c1, o[j][2] *= c0, o[j][3] *= c1;
      uint32_t a[4];
      ldmatrix_x4_trans(a, vt + decode_tile_at<D>((mat >> 1) * 8 + row8, 2 * j + (mat & 1)));
      mma(o[j], a, pb);
    }
    if constexpr (kFp8) store_ahead(k + kStages - 1);  // into tile k - 1's stage, read before the top's barrier
  }
  cp_async_wait<0>();
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  float* sm_acc = shared;                 // [W][kHeads][D]
  float* sm_m = shared + W * kHeads * D;  // [W][kHeads]
  float* sm_l = sm_m + W * kHeads;        // [W][kHeads]
  if (t == 0 && g < kHeads) sm_m[warp * kHeads + g] = m, sm_l[warp * kHeads + g] = l;
#pragma unroll
  for (int j = 0; j < kSteps; ++j) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int d = 16 * j + g + 8 * half;
      if (2 * t < kHeads) sm_acc[(warp * kHeads + 2 * t) * D + d] = o[j][2 * half];
      if (2 * t + 1 < kHeads) sm_acc[(warp * kHeads + 2 * t + 1) * D + d] = o[j][2 * half + 1];
    }
  }
  decode_attention_finish<kHeads>(shared, W, r, h0, active, s, split, y);
}

}  // namespace cohort::models::cuda
