// CUDA prefill attention (contract: prefill_attention.h): the training
// forward's flash scheme (flash_attention.cuh) with its keys and values
// read from the paged or contiguous KV cache instead of packed matrices.
//
// Block = (tile of up to 128 rows of one run, query head): 4 warps x 32
// rows over a bf16 cache (each key and value fragment feeds two 16-row
// products: flash_tiles.cuh's attend_tile_pair), 8 warps x 16 rows over an
// fp8 one (whose next tile waits in registers, below). The queries are
// staged once (fp32 rounded to bf16, as the GEMMs round their operands),
// then 64-key tiles of the cache from position 0 up to the tile's last row
// (a warp skips the tiles wholly past its rows), double-buffered with
// cp.async so tile kt + 1 is in flight while tile kt is multiplied; each
// staged key tile serves 128 rows. A key
// tile's 64 positions are gathered 16 bytes at a time through the block
// table (a paged block holds 16 consecutive positions, so each cache row is
// one contiguous piece), K and V from the same offset.
// Scores stay in registers with an online softmax in fp32; y is written in
// bf16. The causal mask compares key positions with each row's position,
// so a run that starts past position 0 (a later chunk, a reused prefix)
// attends to what is in the cache before it.
#pragma once

#include <algorithm>

#include "models/ops/flash_tiles.cuh"
#include "models/ops/kv_fp8.cuh"
#include "models/ops/prefill_attention.h"

namespace cohort::models::cuda {
namespace prefill {

using flash::bf16;

// A kernel's shape: head size D, kAtoms 16-row atoms a warp (so
// kPrefillTileRows / (16 kAtoms) warps a block) and key tiles of kKeys.
template <int kD, int kAtoms_, int kKeys_>
struct Config {
  static constexpr int D = kD, kAtoms = kAtoms_, kKeys = kKeys_;
  static constexpr int kRows = kPrefillTileRows, kLd = D + 8;
  static constexpr int kRowsPerWarp = 16 * kAtoms, kWarps = kRows / kRowsPerWarp, kThreads = 32 * kWarps;
  // The queries, then [buffer][K, V][kKeys][kLd].
  static constexpr size_t kShared = (size_t(kRows) + 4 * size_t(kKeys)) * kLd * sizeof(bf16);
};

// The tile's queries: rows [row0, row0 + count) of q (fp32, row stride ld)
// as bf16 into s [kRows][kLd]; rows past count are zeros.
template <class C>
__device__ inline void stage_queries(bf16* s, const float* q, size_t ld, int row0, int count) {
  constexpr int kVec = C::D / 4;
  for (int i = threadIdx.x; i < C::kRows * kVec; i += C::kThreads) {
    const int r = i / kVec, c = (i % kVec) * 4;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r < count) x = *reinterpret_cast<const float4*>(q + static_cast<size_t>(row0 + r) * ld + c);
    uint2 packed;
    packed.x = pack_bf16x2(x.x, x.y);
    packed.y = pack_bf16x2(x.z, x.w);
    *reinterpret_cast<uint2*>(s + r * C::kLd + c) = packed;
  }
}

// Positions [key0, key0 + kKeys) of (slot, kv head) into sK and sV
// [kKeys][kLd]; positions past `last` are zeros (their probabilities are
// zero, and a zero V row keeps the product finite). An fp8 cache's codes
// are expanded to bf16 on the way (kv_fp8.cuh).
template <class C, bool kFp8>
__device__ inline void stage_keys(bf16* sK, bf16* sV, const KvView& cache, KvScales scale,
                                  const DecodeRows& rows, const DecodeShape& shape, int slot, int kvh, int key0,
                                  int last) {
  constexpr int kVec = C::D / 8;
  for (int i = threadIdx.x; i < C::kKeys * kVec; i += C::kThreads) {
    const int r = i / kVec, c = (i % kVec) * 8, pos = key0 + r;
    const bool valid = pos <= last;
    const size_t offset = valid ? cache_offset(rows, shape, slot, kvh, pos) + c : 0;
    stage_kv8<kFp8>(shared_address(sK + r * C::kLd + c), cache.k, offset, valid, scale.k);
    stage_kv8<kFp8>(shared_address(sV + r * C::kLd + c), cache.v, offset, valid, scale.v);
  }
}

// An fp8 cache's next key tile in registers (kv_fp8.cuh): loaded before the
// current tile's products, so the loads are in flight while the MMAs run,
// and stored, expanded to bf16, after them. A thread's share of a tile:
// the same pieces stage_keys gives it.
template <class C>
struct KeysAhead {
  static constexpr int kPieces = C::kKeys * (C::D / 8) / C::kThreads;
  uint2 k[kPieces], v[kPieces];
};

template <class C>
__device__ inline void load_keys_ahead(KeysAhead<C>& ahead, const KvView& cache, const DecodeRows& rows,
                                       const DecodeShape& shape, int slot, int kvh, int key0, int last) {
  constexpr int kVec = C::D / 8;
#pragma unroll
  for (int j = 0; j < KeysAhead<C>::kPieces; ++j) {
    const int i = threadIdx.x + j * C::kThreads, r = i / kVec, c = (i % kVec) * 8, pos = key0 + r;
    const bool valid = pos <= last;
    const size_t offset = valid ? cache_offset(rows, shape, slot, kvh, pos) + c : 0;
    ahead.k[j] = load_kv_codes8(cache.k, offset, valid), ahead.v[j] = load_kv_codes8(cache.v, offset, valid);
  }
}

template <class C>
__device__ inline void store_keys_ahead(bf16* sK, bf16* sV, const KeysAhead<C>& ahead, KvScales scale) {
  constexpr int kVec = C::D / 8;
#pragma unroll
  for (int j = 0; j < KeysAhead<C>::kPieces; ++j) {
    const int i = threadIdx.x + j * C::kThreads, r = i / kVec, c = (i % kVec) * 8;
    st_shared16(shared_address(sK + r * C::kLd + c), e4m3x8_to_bf16x8(ahead.k[j], scale.k));
    st_shared16(shared_address(sV + r * C::kLd + c), e4m3x8_to_bf16x8(ahead.v[j], scale.v));
  }
}

// Split over the keys (split.count > 1): block z takes key tiles
// [z * per, (z + 1) * per) of its tile and leaves its unnormalised output
// and softmax state (max in log2 units, sum) in the scratch, which
// merge_kernel folds. A split may hold no key a row sees: its state stays
// (-inf, 0) and merges as nothing.
struct Split {
  int count = 1;
  float* partials = nullptr;  // [tile, head, split, kRows, D + 2]
};

template <class C, bool kFp8>
__global__ void __launch_bounds__(C::kThreads)
    prefill_attention_kernel(Bf16Bits* y, const float* q, KvView cache, DecodeRows rows, const int32_t* tiles,
                             DecodeShape shape, Split split) {
  using namespace flash;
  constexpr int D = C::D, kAtoms = C::kAtoms;
  extern __shared__ __align__(16) unsigned char shared[];
  bf16* sQ = reinterpret_cast<bf16*>(shared);
  bf16* sKV = sQ + C::kRows * C::kLd;  // [buffer][K, V][kKeys][kLd]
  constexpr int kTile = C::kKeys * C::kLd;
  // Later tiles of a run have more keys: they start first.
  const int tile = gridDim.x - 1 - blockIdx.x;
  const int row0 = tiles[2 * tile], count = tiles[2 * tile + 1];
  const int h = blockIdx.y, kvh = h / (shape.hq / shape.hkv);
  const int slot = rows.slots[row0], p0 = rows.positions[row0], last = p0 + count - 1;
  const int ldq = shape.hq * D;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int first = warp * C::kRowsPerWarp;  // the warp's first row in the tile
  // Warps whose rows are all past the tile's rows stage and wait with the
  // others but compute nothing; the others skip key tiles wholly past
  // their last row.
  const bool busy = first < count;
  const int warp_last = p0 + min(first + C::kRowsPerWarp, count) - 1;
  const int tiles_total = last / C::kKeys + 1;
  const int per = (tiles_total + split.count - 1) / split.count;
  const int kt_begin = blockIdx.z * per, kt_end = min(tiles_total, kt_begin + per);
  const KvScales kv_scale = kv_scales(cache, shape.hkv, kvh);

  stage_queries<C>(sQ, q + h * D, ldq, row0, count);
  if (kt_begin < kt_end) {
    stage_keys<C, kFp8>(sKV + (kt_begin & 1) * 2 * kTile, sKV + (kt_begin & 1) * 2 * kTile + kTile,
                                  cache, kv_scale, rows, shape, slot, kvh, kt_begin * C::kKeys, last);
  }
  cp_async_commit();
  // One atom's queries stay in registers; two atoms' are read from shared
  // memory at each step (attend_tile_pair).
  uint32_t qf[kAtoms == 1 ? D / 16 : 1][4];
  const float scale2 = rsqrtf(float(D)) * kLog2e;
  int pos[kAtoms][2];
#pragma unroll
  for (int a = 0; a < kAtoms; ++a) pos[a][0] = p0 + first + 16 * a + g, pos[a][1] = pos[a][0] + 8;
  float o[kAtoms][D / 8][4] = {};
  float m[kAtoms][2], l[kAtoms][2];
#pragma unroll
  for (int a = 0; a < kAtoms; ++a) m[a][0] = m[a][1] = -INFINITY, l[a][0] = l[a][1] = 0.f;
  KeysAhead<C> ahead;
  for (int kt = kt_begin; kt < kt_end; ++kt) {
    const int key0 = kt * C::kKeys;
    bf16* sK = sKV + (kt & 1) * 2 * kTile;
    bf16* sV = sK + kTile;
    bf16* nK = sKV + ((kt + 1) & 1) * 2 * kTile;
    if (kt + 1 < kt_end) {  // the next tile into the other buffer, freed by the last barrier
      if constexpr (kFp8) {
        load_keys_ahead<C>(ahead, cache, rows, shape, slot, kvh, key0 + C::kKeys, last);
      } else {
        stage_keys<C, kFp8>(nK, nK + kTile, cache, kv_scale, rows, shape, slot, kvh, key0 + C::kKeys,
                                      last);
      }
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    // The tiles a warp skips are its last ones (keys only grow), so a warp
    // that computes at all starts at kt_begin.
    if (busy && key0 <= warp_last) {
      const bool masked = key0 + C::kKeys - 1 > p0 + first;
      if constexpr (kAtoms == 1) {
        if (kt == kt_begin) {
#pragma unroll
          for (int kk = 0; kk < D / 16; ++kk) load_a(qf[kk], sQ, C::kLd, first, kk * 16);
        }
        attend_tile<D, C::kKeys, true>(o[0], m[0], l[0], qf, sK, sV, C::kLd, key0, pos[0], masked, scale2);
      } else {
        attend_tile_pair<D, C::kKeys, true>(o, m, l, sQ, C::kLd, first, sK, sV, C::kLd, key0, pos, masked, scale2);
      }
    }
    // fp8: the next tile lands in the other buffer, which no warp reads in this iteration.
    if constexpr (kFp8) {
      if (kt + 1 < kt_end) store_keys_ahead<C>(nK, nK + kTile, ahead, kv_scale);
    }
    __syncthreads();  // this buffer is the next iteration's prefetch target
  }
  if (!busy) return;
#pragma unroll
  for (int a = 0; a < kAtoms; ++a) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = l[a][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int local = first + 16 * a + g + 8 * r;
      if (local >= count) continue;
      if (split.count > 1) {
        float* part = split.partials +
                      ((static_cast<size_t>(tile) * gridDim.y + h) * split.count + blockIdx.z) * C::kRows * (D + 2) +
                      static_cast<size_t>(local) * (D + 2);
#pragma unroll
        for (int nd = 0; nd < D / 8; ++nd) {
          *reinterpret_cast<float2*>(part + nd * 8 + 2 * t) = make_float2(o[a][nd][2 * r], o[a][nd][2 * r + 1]);
        }
        if (t == 0) part[D] = m[a][r], part[D + 1] = sum;
        continue;
      }
      const float inv = 1.0f / sum;
      bf16* yr = reinterpret_cast<bf16*>(y) + static_cast<size_t>(row0 + local) * ldq + h * D;
#pragma unroll
      for (int nd = 0; nd < D / 8; ++nd) {
        store_pair(yr + nd * 8 + 2 * t, o[a][nd][2 * r] * inv, o[a][nd][2 * r + 1] * inv, false);
      }
    }
  }
}

// Folds the splits of each (tile row, head): one warp each, lane j holding
// dims j, j + 32, ... of D.
template <int D>
__global__ void merge_kernel(Bf16Bits* y, const int32_t* tiles, int tile_count, int heads, int ldq, Split split) {
  const int job = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
  const int tile = job / (heads * kPrefillTileRows), rest = job % (heads * kPrefillTileRows);
  const int h = rest / kPrefillTileRows, local = rest % kPrefillTileRows;
  if (tile >= tile_count || local >= tiles[2 * tile + 1]) return;
  const size_t stride = static_cast<size_t>(kPrefillTileRows) * (D + 2);
  const float* base = split.partials + (static_cast<size_t>(tile) * heads + h) * split.count * stride +
                      static_cast<size_t>(local) * (D + 2);
  float top = -INFINITY;
  for (int z = 0; z < split.count; ++z) top = fmaxf(top, base[z * stride + D]);
  float sum = 0.0f, acc[D / 32] = {};
  for (int z = 0; z < split.count; ++z) {
    const float* part = base + z * stride;
    const float mz = part[D];
    if (mz == -INFINITY) continue;
    const float w = exp2f(mz - top);
    sum += part[D + 1] * w;
#pragma unroll
    for (int k = 0; k < D / 32; ++k) acc[k] += part[lane + 32 * k] * w;
  }
  __nv_bfloat16* yr = reinterpret_cast<__nv_bfloat16*>(y) + static_cast<size_t>(tiles[2 * tile] + local) * ldq + h * D;
#pragma unroll
  for (int k = 0; k < D / 32; ++k) yr[lane + 32 * k] = __float2bfloat16(acc[k] / sum);
}

template <class C, bool kFp8>
void launch_config(Bf16Bits* y, const float* q, const KvView& cache, DecodeRows rows, const int32_t* tiles,
                   int tile_count, const DecodeShape& shape, const Split& split, cudaStream_t stream) {
  const auto kernel = prefill_attention_kernel<C, kFp8>;
  // Past the default 48 KiB of dynamic shared memory; a host-side setting,
  // not a stream operation, so this is safe during graph capture too.
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(C::kShared));
  const dim3 grid(tile_count, shape.hq, split.count);
  kernel<<<grid, C::kThreads, C::kShared, stream>>>(y, q, cache, rows, tiles, shape, split);
}

template <int D>
void launch(Bf16Bits* y, const float* q, const KvView& cache, DecodeRows rows, const int32_t* tiles,
            int tile_count, const DecodeShape& shape, const PrefillAttentionScratch& scratch, int longest,
            cudaStream_t stream) {
  Split split;
  split.count = prefill_attention_splits(tile_count, shape.hq, longest, scratch.partials != nullptr);
  split.partials = scratch.partials;
  // An fp8 cache's tile ahead in registers leaves no room for two atoms.
  // (Two atoms over 32-key tiles, measured beside: 5% slower than 64.)
  if (cache.fp8()) {
    launch_config<Config<D, 1, 64>, true>(y, q, cache, rows, tiles, tile_count, shape, split, stream);
  } else {
    launch_config<Config<D, 2, 64>, false>(y, q, cache, rows, tiles, tile_count, shape, split, stream);
  }
  if (split.count > 1) {
    const int jobs = tile_count * shape.hq * kPrefillTileRows, warps = 8;
    merge_kernel<D><<<(jobs + warps - 1) / warps, 32 * warps, 0, stream>>>(y, tiles, tile_count, shape.hq,
                                                                             shape.hq * D, split);
  }
}

}  // namespace prefill

bool prefill_attention_supports(int head_dim) { return head_dim == 64 || head_dim == 128; }

int prefill_attention_splits(int tile_count, int heads, int longest, bool have_scratch) {
  const int blocks = tile_count * heads;
  if (!have_scratch || blocks >= device_multiprocessors()) return 1;
  const int key_tiles = (longest + 63) / 64;
  // Enough blocks to fill the GPU once, at least two key tiles a split,
  // within the scratch.
  const int wanted = std::min(device_multiprocessors() / blocks, key_tiles / 2);
  return std::max(1, std::min({wanted, kPrefillMaxSplits, kPrefillScratchBlocks / blocks}));
}

void prefill_attention(Bf16Bits* y, const float* q, const KvView& cache, DecodeRows rows, const int32_t* tiles,
                       int tile_count, const DecodeShape& shape, CUstream_st* stream,
                       const PrefillAttentionScratch& scratch, int longest) {
  if (tile_count == 0) return;
  if (shape.head_dim == 128) {
    prefill::launch<128>(y, q, cache, rows, tiles, tile_count, shape, scratch, longest, stream);
  } else {
    prefill::launch<64>(y, q, cache, rows, tiles, tile_count, shape, scratch, longest, stream);
  }
}

void prefill_attention(Bf16Bits* y, const float* q, const Bf16Bits* k_cache, const Bf16Bits* v_cache,
                       DecodeRows rows, const int32_t* tiles, int tile_count, const DecodeShape& shape,
                       CUstream_st* stream, const PrefillAttentionScratch& scratch, int longest) {
  prefill_attention(y, q, KvView{const_cast<Bf16Bits*>(k_cache), const_cast<Bf16Bits*>(v_cache)}, rows, tiles,
                    tile_count, shape, stream, scratch, longest);
}

}  // namespace cohort::models::cuda
