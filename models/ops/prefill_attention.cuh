// CUDA prefill attention (contract: prefill_attention.h): the training
// forward's flash scheme (flash_attention.cuh) with its keys and values
// read from the paged or contiguous KV cache instead of packed matrices.
//
// Block = (tile of up to 128 rows of one run, query head): 8 warps x 16
// rows, the queries staged once (fp32 rounded to bf16, as the GEMMs round
// their operands), then 64-key tiles of the cache from position 0 up to the
// tile's last row, double-buffered with cp.async so tile kt + 1 is in flight
// while tile kt is multiplied; each staged key tile serves 128 rows. A key
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

constexpr int kWarps = kPrefillTileRows / 16;
constexpr int kThreads = 32 * kWarps;

template <int D>
struct Tiles {
  static constexpr int kRows = kPrefillTileRows, kKeys = 64, kLd = D + 8;
  static constexpr size_t kShared = (size_t(kRows) + 4 * size_t(kKeys)) * kLd * sizeof(bf16);
};

// The tile's queries: rows [row0, row0 + count) of q (fp32, row stride ld)
// as bf16 into s [kRows][kLd]; rows past count are zeros.
template <int D>
__device__ inline void stage_queries(bf16* s, const float* q, size_t ld, int row0, int count) {
  using T = Tiles<D>;
  constexpr int kVec = D / 4;
  for (int i = threadIdx.x; i < T::kRows * kVec; i += kThreads) {
    const int r = i / kVec, c = (i % kVec) * 4;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r < count) x = *reinterpret_cast<const float4*>(q + static_cast<size_t>(row0 + r) * ld + c);
    uint2 packed;
    packed.x = pack_bf16x2(x.x, x.y);
    packed.y = pack_bf16x2(x.z, x.w);
    *reinterpret_cast<uint2*>(s + r * T::kLd + c) = packed;
  }
}

// Positions [key0, key0 + kKeys) of (slot, kv head) into sK and sV
// [kKeys][kLd]; positions past `last` are zeros (their probabilities are
// zero, and a zero V row keeps the product finite). An fp8 cache's codes
// are expanded to bf16 on the way (kv_fp8.cuh).
template <int D, bool kFp8>
__device__ inline void stage_keys(bf16* sK, bf16* sV, const KvView& cache, KvScales scale,
                                  const DecodeRows& rows, const DecodeShape& shape, int slot, int kvh, int key0,
                                  int last) {
  using T = Tiles<D>;
  constexpr int kVec = D / 8;
  for (int i = threadIdx.x; i < T::kKeys * kVec; i += kThreads) {
    const int r = i / kVec, c = (i % kVec) * 8, pos = key0 + r;
    const bool valid = pos <= last;
    const size_t offset = valid ? cache_offset(rows, shape, slot, kvh, pos) + c : 0;
    stage_kv8<kFp8>(shared_address(sK + r * T::kLd + c), cache.k, offset, valid, scale.k);
    stage_kv8<kFp8>(shared_address(sV + r * T::kLd + c), cache.v, offset, valid, scale.v);
  }
}

// An fp8 cache's next key tile in registers (kv_fp8.cuh): loaded before the
// current tile's products, so the loads are in flight while the MMAs run,
// and stored, expanded to bf16, after them. A thread's share of a tile:
// the same pieces stage_keys gives it.
template <int D>
struct KeysAhead {
  static constexpr int kPieces = Tiles<D>::kKeys * (D / 8) / kThreads;
  uint2 k[kPieces], v[kPieces];
};

template <int D>
__device__ inline void load_keys_ahead(KeysAhead<D>& ahead, const KvView& cache, const DecodeRows& rows,
                                       const DecodeShape& shape, int slot, int kvh, int key0, int last) {
  constexpr int kVec = D / 8;
#pragma unroll
  for (int j = 0; j < KeysAhead<D>::kPieces; ++j) {
    const int i = threadIdx.x + j * kThreads, r = i / kVec, c = (i % kVec) * 8, pos = key0 + r;
    const bool valid = pos <= last;
    const size_t offset = valid ? cache_offset(rows, shape, slot, kvh, pos) + c : 0;
    ahead.k[j] = load_kv_codes8(cache.k, offset, valid), ahead.v[j] = load_kv_codes8(cache.v, offset, valid);
  }
}

template <int D>
__device__ inline void store_keys_ahead(bf16* sK, bf16* sV, const KeysAhead<D>& ahead, KvScales scale) {
  using T = Tiles<D>;
  constexpr int kVec = D / 8;
#pragma unroll
  for (int j = 0; j < KeysAhead<D>::kPieces; ++j) {
    const int i = threadIdx.x + j * kThreads, r = i / kVec, c = (i % kVec) * 8;
    st_shared16(shared_address(sK + r * T::kLd + c), e4m3x8_to_bf16x8(ahead.k[j], scale.k));
    st_shared16(shared_address(sV + r * T::kLd + c), e4m3x8_to_bf16x8(ahead.v[j], scale.v));
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

template <int D, bool kFp8>
__global__ void __launch_bounds__(kThreads)
    prefill_attention_kernel(Bf16Bits* y, const float* q, KvView cache, DecodeRows rows, const int32_t* tiles,
                             DecodeShape shape, Split split) {
  using namespace flash;
  using T = Tiles<D>;
  extern __shared__ __align__(16) unsigned char shared[];
  bf16* sQ = reinterpret_cast<bf16*>(shared);
  bf16* sKV = sQ + T::kRows * T::kLd;  // [buffer][K, V][kKeys][kLd]
  constexpr int kTile = T::kKeys * T::kLd;
  // Later tiles of a run have more keys: they start first.
  const int tile = gridDim.x - 1 - blockIdx.x;
  const int row0 = tiles[2 * tile], count = tiles[2 * tile + 1];
  const int h = blockIdx.y, kvh = h / (shape.hq / shape.hkv);
  const int slot = rows.slots[row0], p0 = rows.positions[row0], last = p0 + count - 1;
  const int ldq = shape.hq * D;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  // Warps whose 16 rows are all past the tile's rows stage and wait with
  // the others but compute nothing.
  const bool busy = warp * 16 < count;
  const int tiles_total = last / T::kKeys + 1;
  const int per = (tiles_total + split.count - 1) / split.count;
  const int kt_begin = blockIdx.z * per, kt_end = min(tiles_total, kt_begin + per);
  const KvScales kv_scale = kv_scales(cache, shape.hkv, kvh);

  stage_queries<D>(sQ, q + h * D, ldq, row0, count);
  if (kt_begin < kt_end) {
    stage_keys<D, kFp8>(sKV + (kt_begin & 1) * 2 * kTile, sKV + (kt_begin & 1) * 2 * kTile + kTile, cache,
                        kv_scale, rows, shape, slot, kvh, kt_begin * T::kKeys, last);
  }
  cp_async_commit();
  uint32_t qf[D / 16][4];
  const float scale2 = rsqrtf(float(D)) * kLog2e;
  const int pos[2] = {p0 + warp * 16 + g, p0 + warp * 16 + g + 8};
  float o[D / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  KeysAhead<D> ahead;
  for (int kt = kt_begin; kt < kt_end; ++kt) {
    const int key0 = kt * T::kKeys;
    bf16* sK = sKV + (kt & 1) * 2 * kTile;
    bf16* sV = sK + kTile;
    bf16* nK = sKV + ((kt + 1) & 1) * 2 * kTile;
    if (kt + 1 < kt_end) {  // the next tile into the other buffer, freed by the last barrier
      if constexpr (kFp8) {
        load_keys_ahead<D>(ahead, cache, rows, shape, slot, kvh, key0 + T::kKeys, last);
      } else {
        stage_keys<D, kFp8>(nK, nK + kTile, cache, kv_scale, rows, shape, slot, kvh, key0 + T::kKeys, last);
      }
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if (busy) {
      if (kt == kt_begin) {
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) load_a(qf[kk], sQ, T::kLd, warp * 16, kk * 16);
      }
      attend_tile<D, T::kKeys, true>(o, m, l, qf, sK, sV, T::kLd, key0, pos,
                                     key0 + T::kKeys - 1 > p0 + warp * 16, scale2);
    }
    // fp8: the next tile lands in the other buffer, which no warp reads in this iteration.
    if constexpr (kFp8) {
      if (kt + 1 < kt_end) store_keys_ahead<D>(nK, nK + kTile, ahead, kv_scale);
    }
    __syncthreads();  // this buffer is the next iteration's prefetch target
  }
  if (!busy) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    const int local = warp * 16 + g + 8 * r;
    if (local >= count) continue;
    if (split.count > 1) {
      float* part = split.partials +
                    ((static_cast<size_t>(tile) * gridDim.y + h) * split.count + blockIdx.z) * T::kRows * (D + 2) +
                    static_cast<size_t>(local) * (D + 2);
#pragma unroll
      for (int nd = 0; nd < D / 8; ++nd) {
        *reinterpret_cast<float2*>(part + nd * 8 + 2 * t) = make_float2(o[nd][2 * r], o[nd][2 * r + 1]);
      }
      if (t == 0) part[D] = m[r], part[D + 1] = l[r];
      continue;
    }
    const float inv = 1.0f / l[r];
    bf16* yr = reinterpret_cast<bf16*>(y) + static_cast<size_t>(row0 + local) * ldq + h * D;
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) {
      store_pair(yr + nd * 8 + 2 * t, o[nd][2 * r] * inv, o[nd][2 * r + 1] * inv, false);
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

template <int D>
void launch(Bf16Bits* y, const float* q, const KvView& cache, DecodeRows rows, const int32_t* tiles,
            int tile_count, const DecodeShape& shape, const PrefillAttentionScratch& scratch, int longest,
            cudaStream_t stream) {
  const auto kernel = cache.fp8() ? prefill_attention_kernel<D, true> : prefill_attention_kernel<D, false>;
  // Past the default 48 KiB of dynamic shared memory; a host-side setting,
  // not a stream operation, so this is safe during graph capture too.
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Tiles<D>::kShared));
  Split split;
  split.count = prefill_attention_splits(tile_count, shape.hq, longest, scratch.partials != nullptr);
  split.partials = scratch.partials;
  const dim3 grid(tile_count, shape.hq, split.count);
  kernel<<<grid, kThreads, Tiles<D>::kShared, stream>>>(y, q, cache, rows, tiles, shape, split);
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
