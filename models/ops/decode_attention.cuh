// CUDA decode attention (CPU reference and contract: decode_attention.h):
// the lanes form here, the tensor-core form in decode_attention_tiles.cuh,
// the launchers for both at the end.
//
// Flash decoding over grouped-query heads. A block of 4 warps serves one row,
// up to kDecodeMaxHeads query heads of one KV group (so the group's K and V
// are read once for all of them, not once per query head) and one split of
// the row's positions: at a few rows a KV head's context is cut into
// `splits` ranges whose blocks run side by side, and the last of them to
// finish (an atomic count) merges their partial softmax states in split
// order, so results are deterministic. How many splits a launch takes is
// fixed when a decode step is captured, so each block derives its range from
// the row's position at run time, and ranges beyond the context do nothing.
//
// A cache position is handled by D / 8 lanes (8 dims each, one 16-byte
// vector of K and one of V), so a warp holds 32 / (D / 8) lane groups, and
// each group takes a few positions a round. Rounds are copied into shared
// memory (cp.async) several ahead of the one in use: at contexts of a few
// hundred positions a block has only a few rounds, and with one or two in
// flight each cost a memory round trip. Every lane group keeps an online
// softmax state (max, sum, accumulator) per head in fp32, merged within the
// warp (shuffles), across warps (shared memory) and across splits (global
// scratch).
#pragma once

#include <algorithm>
#include <cfloat>
#include <type_traits>

#include "models/cuda/common.cuh"
#include "models/ops/decode_attention.h"
#include "models/ops/decode_attention_state.cuh"
#include "models/ops/decode_attention_tiles.cuh"
#include "models/ops/decode_qkv.cuh"

namespace cohort::models::cuda {

// Warps a block: 16 where the launch has fewer (row, KV head) pairs than
// the GPU has multiprocessors (a decode step of a few rows: each block then
// takes a multiprocessor's worth of positions a round), else 4 (four
// blocks a multiprocessor, so that a batch of dozens of rows is one wave).
constexpr int kDecodeAttnWarpsFew = 16;
constexpr int kDecodeAttnWarps = 4;
constexpr int kDecodeDimsPerLane = 8;
// Positions a lane group takes a round: fewer when it carries more heads,
// so that the block stays within 128 registers.
constexpr int decode_positions_per_group(int heads) { return heads >= 4 ? 1 : 2; }
// Rounds staged through shared memory: the K and V of kDecodeAttnStages - 1
// rounds are in flight (cp.async) while one is used, so that a block's
// rounds do not each wait a memory round trip. Each lane reads back only
// the vectors it copied itself, so no barrier stands between the rounds.
constexpr int kDecodeAttnStages = 5;

// Merges a partial softmax state (m, l, acc) with another one.
__device__ inline void merge_softmax_state(float& m, float& l, float* acc, float m2, float l2,
                                           const float* acc2) {
  const float M = fmaxf(m, m2);
  const float a = m == -FLT_MAX ? 0.0f : __expf(m - M);
  const float b = m2 == -FLT_MAX ? 0.0f : __expf(m2 - M);
  l = l * a + l2 * b;
  for (int k = 0; k < kDecodeDimsPerLane; ++k) acc[k] = acc[k] * a + acc2[k] * b;
  m = M;
}

inline size_t decode_attention_shared_bytes(const DecodeShape& s, int heads, int warps, bool fused,
                                            bool paged) {
  return decode_attention_stage_offset(s, heads, warps, fused, paged) +
         size_t{16} * kDecodeAttnStages * 2 * decode_positions_per_group(heads) * 32 * warps;
}

// kFused: the decode-step form (decode_attention_fused); else q comes
// ready from qkv_rope_cache and the row's own position from the cache.
// kFp8: the cache holds e4m3 codes (kv_fp8.h), 8 bytes a lane's piece, in
// the first half of its 16-byte stage slot.
// Grid: (rows, KV heads x blocks of heads a KV head, splits).
template <bool kFused, int kHeads, int W, bool kFp8>
__global__ void __launch_bounds__(32 * W, W == kDecodeAttnWarps ? 4 : 1)
    decode_attention_kernel(const float* q, DecodeQkv own, KvView cache, DecodeRows rows, DecodeShape s,
                            DecodeSplits split, Bf16Bits* y) {
  constexpr int P = decode_positions_per_group(kHeads);
  constexpr int E = kDecodeDimsPerLane;
  const int D = s.head_dim;
  const int lanes = D / E, per_warp = 32 / lanes;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = lane / lanes, sub = lane % lanes;
  const int groups = W * per_warp, my_group = warp * per_warp + group;
  const int span = P * groups;  // positions a round
  // In the fused form every cached position below the row's own was
  // written by an earlier step, so it may be read before the wait too.
  const DecodeBlock b = decode_block(rows, s, kHeads, split.splits, span);
  const int r = b.r, kv = b.kv, part = b.part, h0 = b.h0, pos = b.pos;
  const int begin = b.range.begin, end = b.range.end, active = b.range.active;
  if (begin > pos) return;  // a split beyond this row's context
  extern __shared__ float shared[];
  const DecodeSharedParts layout = decode_shared_parts(shared, W, kHeads, D, kFused);
  // [stage][K or V][P][thread] 16-byte vectors, after the table (16-byte
  // aligned: the launcher rounds the space before them up).
  uint4* staged = reinterpret_cast<uint4*>(
      reinterpret_cast<char*>(shared) + decode_attention_stage_offset(s, kHeads, W, kFused, rows.block_table != nullptr));
  const DecodeCachePlace place = decode_cache_place(rows, s, b.slot, kv, begin, end, layout.table);
  // Each lane group takes P positions a round, interleaved with the other
  // groups' (neighbouring groups read neighbouring positions). Round i
  // (positions from begin + i span) is staged in stage i mod kStages.
  constexpr int kStages = kDecodeAttnStages;
  const int rounds = (end - begin + span - 1) / span;
  auto slot_of = [&](int stage, int kind, int u) {
    return staged + ((stage * 2 + kind) * P + u) * (32 * W) + threadIdx.x;
  };
  auto issue_round = [&](int i) {
    if (i < rounds) {
      const int base = begin + i * span, stage = i % kStages;
#pragma unroll
      for (int u = 0; u < P; ++u) {
        const int t = base + u * groups + my_group;
        const bool valid = t < end && (!kFused || t < pos);
        const size_t at = valid ? place.offset(s, kv, t) + sub * E : 0;
        if constexpr (kFp8) {
          cp_async8(shared_address(slot_of(stage, 0, u)), static_cast<const uint8_t*>(cache.k) + at, valid);
          cp_async8(shared_address(slot_of(stage, 1, u)), static_cast<const uint8_t*>(cache.v) + at, valid);
        } else {
          cp_async16(slot_of(stage, 0, u), static_cast<const Bf16Bits*>(cache.k) + at, valid);
          cp_async16(slot_of(stage, 1, u), static_cast<const Bf16Bits*>(cache.v) + at, valid);
        }
      }
    }
    cp_async_commit();  // empty past the last round: the count of groups stays even
  };
  DecodeQkvConstants<kHeads> constants;
  if constexpr (kFused) {
    for (int i = 0; i < kStages - 1; ++i) issue_round(i);
    constants = decode_own_constants<kHeads>(own, rows, s, r, h0, kv);
  }
  begin_dependent();
  const float scale = rsqrtf(static_cast<float>(D));
  const KvScales kv_scale = kv_scales(cache, s.hkv, kv);
  float qv[kHeads][E], acc[kHeads][E], m[kHeads], l[kHeads];
  if constexpr (kFused) {
    decode_own_qkv<kHeads, kFp8>(own, constants, rows, s, r, h0, kv, part == 0 && blockIdx.z == 0,
                                 layout.q, layout.k, layout.v, cache);
    __syncthreads();
#pragma unroll
    for (int g = 0; g < kHeads; ++g) {
      for (int k = 0; k < E; ++k) qv[g][k] = layout.q[g * D + sub * E + k] * scale;
    }
  } else {
#pragma unroll
    for (int g = 0; g < kHeads; ++g) {
      const float* qrow = q + (static_cast<size_t>(r) * s.hq + h0 + g) * D + sub * E;
      for (int k = 0; k < E; ++k) qv[g][k] = qrow[k] * scale;
    }
    for (int i = 0; i < kStages - 1; ++i) issue_round(i);
  }
#pragma unroll
  for (int g = 0; g < kHeads; ++g) {
    m[g] = -FLT_MAX, l[g] = 0.0f;
    for (int k = 0; k < E; ++k) acc[g][k] = 0.0f;
  }
  // A staged piece as floats: the own row's (fused form, from shared
  // memory) is bf16 whatever the cache holds.
  auto unpack = [&](const uint4& raw, bool own_row, float cache_scale, float* out) {
    if (kFp8 && !own_row) {
      unpack8_e4m3(raw.x, raw.y, cache_scale, out);
    } else {
      unpack8_bf16(raw, out);
    }
  };
  auto use_round = [&](int base, uint4 (&kraw)[P], uint4 (&vraw)[P]) {
    bool own_row[P] = {};
    if constexpr (kFused) {  // the row's own position, from shared memory
#pragma unroll
      for (int u = 0; u < P; ++u) {
        if (base + u * groups + my_group == pos) {
          kraw[u] = *reinterpret_cast<const uint4*>(layout.k + sub * E);
          vraw[u] = *reinterpret_cast<const uint4*>(layout.v + sub * E);
          own_row[u] = true;
        }
      }
    }
    float dot[P][kHeads];
#pragma unroll
    for (int u = 0; u < P; ++u) {
      float kf[E];
      unpack(kraw[u], own_row[u], kv_scale.k, kf);
#pragma unroll
      for (int g = 0; g < kHeads; ++g) {
        float d = 0.0f;
        for (int k = 0; k < E; ++k) d += qv[g][k] * kf[k];
        for (int o = lanes / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
        dot[u][g] = d;
      }
    }
    if (base + my_group >= end) return;  // none of this round's positions is ours
#pragma unroll
    for (int g = 0; g < kHeads; ++g) {
      float M = m[g];
#pragma unroll
      for (int u = 0; u < P; ++u) {
        if (base + u * groups + my_group < end) M = fmaxf(M, dot[u][g]);
      }
      const float corr = __expf(m[g] - M);
      l[g] *= corr;
      for (int k = 0; k < E; ++k) acc[g][k] *= corr;
      m[g] = M;
    }
#pragma unroll
    for (int u = 0; u < P; ++u) {
      if (base + u * groups + my_group >= end) break;
      float vf[E];
      unpack(vraw[u], own_row[u], kv_scale.v, vf);
#pragma unroll
      for (int g = 0; g < kHeads; ++g) {
        const float p = __expf(dot[u][g] - m[g]);
        l[g] += p;
        for (int k = 0; k < E; ++k) acc[g][k] = fmaf(p, vf[k], acc[g][k]);
      }
    }
  };
  for (int i = 0; i < rounds; ++i) {
    cp_async_wait<kStages - 2>();  // round i's copies (this thread's) landed
    uint4 kraw[P], vraw[P];
    const int stage = i % kStages;
#pragma unroll
    for (int u = 0; u < P; ++u) kraw[u] = *slot_of(stage, 0, u), vraw[u] = *slot_of(stage, 1, u);
    // Into the stage round i - 1 used, which this thread has read.
    issue_round(i + kStages - 1);
    use_round(begin + i * span, kraw, vraw);
  }
  cp_async_wait<0>();
  for (int o = lanes; o < 32; o <<= 1) {  // groups holding the same dims
#pragma unroll
    for (int g = 0; g < kHeads; ++g) {
      float other[E];
      const float m2 = __shfl_xor_sync(0xffffffffu, m[g], o);
      const float l2 = __shfl_xor_sync(0xffffffffu, l[g], o);
      for (int k = 0; k < E; ++k) other[k] = __shfl_xor_sync(0xffffffffu, acc[g][k], o);
      merge_softmax_state(m[g], l[g], acc[g], m2, l2, other);
    }
  }
  float* sm_acc = shared;                 // [W][kHeads][D]
  float* sm_m = shared + W * kHeads * D;  // [W][kHeads]
  float* sm_l = sm_m + W * kHeads;        // [W][kHeads]
  if (group == 0) {
#pragma unroll
    for (int g = 0; g < kHeads; ++g) {
      for (int k = 0; k < E; ++k) sm_acc[(warp * kHeads + g) * D + sub * E + k] = acc[g][k];
      if (sub == 0) sm_m[warp * kHeads + g] = m[g], sm_l[warp * kHeads + g] = l[g];
    }
  }
  decode_attention_finish<kHeads>(shared, W, r, h0, active, s, split, y);
}

// Query heads a block serves: the most of 4, 2 or 1 that divides the group.
inline int decode_heads_per_block(const DecodeShape& s) {
  const int group = s.hq / s.hkv;
  return group % 4 == 0 ? 4 : group % 2 == 0 ? 2 : 1;
}



bool decode_attention_supports(int head_dim) {
  return head_dim % kDecodeDimsPerLane == 0 && head_dim / kDecodeDimsPerLane <= 32 &&
         32 % (head_dim / kDecodeDimsPerLane) == 0;
}

// Warps a block of the lanes form for a launch of `blocks` (row, block of
// heads) pairs.
inline int decode_attention_warps(int blocks) {
  return blocks < device_multiprocessors() ? kDecodeAttnWarpsFew : kDecodeAttnWarps;
}

DecodeAttentionForm decode_attention_form(int n, const DecodeShape& shape,
                                          DecodeAttentionForm wanted) {
  const int heads = decode_heads_per_block(shape);
  const bool tiles = decode_attention_tiles_support(shape.head_dim, heads);
  const bool many = n * (shape.hq / heads) >= device_multiprocessors();
  return tiles && (wanted == DecodeAttentionForm::kTiles ||
                   (wanted == DecodeAttentionForm::kAuto && many))
             ? DecodeAttentionForm::kTiles
             : DecodeAttentionForm::kLanes;
}

// Blocks of a launch that a multiprocessor holds at once: the lanes form
// one of 16 warps or four of 4 (at most 128 registers a thread); the tiles
// form as many as its shared memory allows (the fused, paged form's).
inline int decode_attention_blocks_per_sm(const DecodeShape& shape, int blocks,
                                          DecodeAttentionForm form) {
  if (form == DecodeAttentionForm::kLanes) {
    return decode_attention_warps(blocks) == kDecodeAttnWarps ? 4 : 1;
  }
  // Each block also holds 1 KiB the runtime reserves.
  const size_t block_bytes =
      decode_tiles_shared_bytes(shape, decode_heads_per_block(shape), true, true) + 1024;
  return std::max(1, static_cast<int>(device_shared_bytes_per_multiprocessor() / block_bytes));
}

int decode_attention_splits(int n, const DecodeShape& shape, bool have_scratch,
                            DecodeAttentionForm form) {
  const int blocks = n * (shape.hq / decode_heads_per_block(shape));
  if (!have_scratch || blocks > kDecodeAttnScratchBlocks) return 1;
  form = decode_attention_form(n, shape, form);
  const int resident = device_multiprocessors() * decode_attention_blocks_per_sm(shape, blocks, form);
  // No more blocks than fit at once: a second wave costs more than the
  // longer ranges it shortens.
  const int wanted = std::max(1, resident / blocks);
  return std::min({wanted, kDecodeAttnMaxSplits, kDecodeAttnScratchBlocks / blocks});
}

template <bool kFused, bool kFp8>
void launch_decode_attention(Bf16Bits* y, const float* q, const DecodeQkv& own, const KvView& cache,
                             DecodeRows rows, int n, const DecodeShape& shape,
                             const DecodeAttentionScratch& scratch, int splits,
                             DecodeAttentionForm form, CUstream_st* stream) {
  const int heads = decode_heads_per_block(shape);
  const bool have_scratch = scratch.partials != nullptr && scratch.arrivals != nullptr;
  const bool paged = rows.block_table != nullptr;
  const int blocks = n * (shape.hq / heads);
  form = decode_attention_form(n, shape, form);
  // A forced count is held to what the splits' own choice may reach.
  const int most = have_scratch && blocks <= kDecodeAttnScratchBlocks
                       ? std::min(kDecodeAttnMaxSplits, kDecodeAttnScratchBlocks / blocks)
                       : 1;
  splits = splits > 0 ? std::min(splits, most)
                      : decode_attention_splits(n, shape, have_scratch, form);
  const DecodeSplits split{splits, scratch.partials, scratch.arrivals};
  const dim3 grid(n, shape.hq / heads, splits);
  auto go = [&](auto kernel, int warps, size_t smem) {
    // Past the default 48 KiB: the tiles form's stages, or a long paged
    // context's table (capacities past about 100,000 positions).
    if (smem > (size_t{48} << 10)) {
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    }
    launch_dependent(kernel, grid, 32 * warps, smem, stream, q, own, cache, rows, shape, split, y);
  };
  if (form == DecodeAttentionForm::kTiles) {
    const size_t smem = decode_tiles_shared_bytes(shape, heads, kFused, paged);
    auto go_heads = [&](auto dim_constant) {
      constexpr int D = decltype(dim_constant)::value;
      if (heads == 4) go(decode_attention_tiles_kernel<kFused, 4, D, kFp8>, kDecodeTileWarps, smem);
      else if (heads == 2) go(decode_attention_tiles_kernel<kFused, 2, D, kFp8>, kDecodeTileWarps, smem);
      else go(decode_attention_tiles_kernel<kFused, 1, D, kFp8>, kDecodeTileWarps, smem);
    };
    if (shape.head_dim == 128) {
      go_heads(std::integral_constant<int, 128>{});
    } else {
      go_heads(std::integral_constant<int, 64>{});
    }
    return;
  }
  const int warps = decode_attention_warps(blocks);
  const size_t smem = decode_attention_shared_bytes(shape, heads, warps, kFused, paged);
  auto go_heads = [&](auto warps_constant) {
    constexpr int W = decltype(warps_constant)::value;
    if (heads == 4) go(decode_attention_kernel<kFused, 4, W, kFp8>, W, smem);
    else if (heads == 2) go(decode_attention_kernel<kFused, 2, W, kFp8>, W, smem);
    else go(decode_attention_kernel<kFused, 1, W, kFp8>, W, smem);
  };
  if (warps == kDecodeAttnWarpsFew) {
    go_heads(std::integral_constant<int, kDecodeAttnWarpsFew>{});
  } else {
    go_heads(std::integral_constant<int, kDecodeAttnWarps>{});
  }
}

void decode_attention(Bf16Bits* y, const float* q, const KvView& cache, DecodeRows rows, int n,
                      const DecodeShape& shape, const DecodeAttentionScratch& scratch, CUstream_st* stream,
                      int splits, DecodeAttentionForm form) {
  if (cache.fp8()) {
    launch_decode_attention<false, true>(y, q, DecodeQkv{}, cache, rows, n, shape, scratch, splits, form, stream);
  } else {
    launch_decode_attention<false, false>(y, q, DecodeQkv{}, cache, rows, n, shape, scratch, splits, form, stream);
  }
}

void decode_attention(Bf16Bits* y, const float* q, const Bf16Bits* k_cache,
                      const Bf16Bits* v_cache, DecodeRows rows, int n, const DecodeShape& shape,
                      const DecodeAttentionScratch& scratch, CUstream_st* stream, int splits,
                      DecodeAttentionForm form) {
  // The plain form only reads the cache.
  decode_attention(y, q, KvView{const_cast<Bf16Bits*>(k_cache), const_cast<Bf16Bits*>(v_cache)}, rows, n, shape,
                   scratch, stream, splits, form);
}

void decode_attention_fused(Bf16Bits* y, const KvView& cache, const float* qkv, const float* qkv_bias,
                            const float* q_norm, const float* k_norm, const float* cos, const float* sin,
                            DecodeRows rows, int n, const DecodeShape& shape,
                            const DecodeAttentionScratch& scratch, CUstream_st* stream, int splits,
                            DecodeAttentionForm form) {
  const DecodeQkv own{qkv, qkv_bias, q_norm, k_norm, cos, sin};
  if (cache.fp8()) {
    launch_decode_attention<true, true>(y, nullptr, own, cache, rows, n, shape, scratch, splits, form, stream);
  } else {
    launch_decode_attention<true, false>(y, nullptr, own, cache, rows, n, shape, scratch, splits, form, stream);
  }
}

void decode_attention_fused(Bf16Bits* y, Bf16Bits* k_cache, Bf16Bits* v_cache, const float* qkv,
                            const float* qkv_bias, const float* q_norm, const float* k_norm,
                            const float* cos, const float* sin, DecodeRows rows, int n,
                            const DecodeShape& shape, const DecodeAttentionScratch& scratch,
                            CUstream_st* stream, int splits, DecodeAttentionForm form) {
  decode_attention_fused(y, KvView{k_cache, v_cache}, qkv, qkv_bias, q_norm, k_norm, cos, sin, rows, n, shape,
                         scratch, stream, splits, form);
}

}  // namespace cohort::models::cuda
