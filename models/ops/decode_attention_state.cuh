// What the two decode attention kernels share (decode_attention.cuh, the
// lanes form; decode_attention_tiles.cuh, the tensor-core form): a block's
// range of positions within its row's splits, the paged table staged in
// shared memory, and the end of a block: its warps' softmax states merged,
// then written, or published for the row's last split to merge.
#pragma once

#include <cfloat>

#include "models/cuda/common.cuh"
#include "models/ops/decode_attention.h"

namespace cohort::models::cuda {

// A split covers at least this many rounds: merging splits costs a fence,
// an atomic and a read of the partials, about what two rounds of loads do.
constexpr int kDecodeAttnMinRounds = 2;

// Where a launch with several splits leaves its partial states: for each
// (row, block of heads, split) kHeads accumulators of D floats, then the
// kHeads maxima and the kHeads sums; and per (row, block of heads) the
// count of splits that have finished, zero between launches.
struct DecodeSplits {
  int splits = 1;
  float* partials = nullptr;
  int* arrivals = nullptr;
};

// Shared memory of a block: the warps' softmax states, the fused form's q,
// k and v, a paged split's table entries, then (from a 16-byte boundary)
// the staged positions.
__host__ __device__ inline size_t decode_attention_stage_offset(const DecodeShape& s, int heads,
                                                                int warps, bool fused, bool paged) {
  const size_t before = sizeof(float) * warps * heads * (s.head_dim + 2) +
                        (fused ? sizeof(float) * heads * s.head_dim + 2 * sizeof(Bf16Bits) * s.head_dim : 0) +
                        (paged ? sizeof(int) * blocks_per_slot(s) : 0);
  return (before + 15) / 16 * 16;
}

// The pieces of a block's shared memory before its staged positions (the
// layout decode_attention_stage_offset sizes): the warps' states at
// `shared`, then the fused form's q [heads][D] (fp32) and the row's own k
// and v (bf16), then the paged split's table entries.
struct DecodeSharedParts {
  float* q;
  Bf16Bits* k;
  Bf16Bits* v;
  int* table;
};
__device__ inline DecodeSharedParts decode_shared_parts(float* shared, int warps, int heads, int D,
                                                        bool fused) {
  DecodeSharedParts p;
  p.q = shared + warps * heads * (D + 2);
  p.k = reinterpret_cast<Bf16Bits*>(p.q + (fused ? heads * D : 0));
  p.v = p.k + D;
  p.table = reinterpret_cast<int*>(p.k + (fused ? 2 * D : 0));
  return p;
}

// The block's positions [begin, end) of a row of `length` positions, whole
// rounds of `span` positions as even as they go over the launch's splits
// (blockIdx.z), and how many splits the row really has (`active`; blocks
// past them have begin >= length and do nothing).
struct DecodeRange {
  int begin, end, active;
};
__device__ inline DecodeRange decode_split_range(int length, int splits, int span) {
  const int per_split = (length + splits - 1) / splits;
  const int chunk = max((per_split + span - 1) / span * span, kDecodeAttnMinRounds * span);
  const int begin = blockIdx.z * chunk;
  return {begin, min(length, begin + chunk), (length + chunk - 1) / chunk};
}

// What a block serves (grid: rows, KV heads x blocks of heads a KV head,
// splits): row r at its slot and position, query heads h0 .. h0 + heads - 1
// of KV head kv (`part` of the group's blocks), positions `range`. Row
// indices were copied in before the step's first kernel, so they may be
// read before the wait on the predecessor.
struct DecodeBlock {
  int r, kv, part, h0, pos, slot;
  DecodeRange range;
};
__device__ inline DecodeBlock decode_block(const DecodeRows& rows, const DecodeShape& s, int heads,
                                           int splits, int span) {
  DecodeBlock b;
  const int group_size = s.hq / s.hkv, parts = group_size / heads;
  b.r = blockIdx.x;
  b.kv = blockIdx.y / parts, b.part = blockIdx.y % parts;
  b.h0 = b.kv * group_size + b.part * heads;
  b.pos = rows.positions[b.r], b.slot = rows.slots[b.r];
  b.range = decode_split_range(b.pos + 1, splits, span);
  return b;
}

// Where a block's KV head keeps position t: the slot's run of positions
// (contiguous layout), or the block named by the split's table entries,
// staged in shared memory so that a copy does not wait on a lookup first.
struct DecodeCachePlace {
  const int* table = nullptr;  // null: contiguous
  int first_block = 0;
  size_t head_base = 0;

  __device__ size_t offset(const DecodeShape& s, int kv, int t) const {
    if (table == nullptr) return head_base + static_cast<size_t>(t) * s.head_dim;
    const int within = t & ((1 << s.block_shift) - 1);
    return ((static_cast<size_t>(table[(t >> s.block_shift) - first_block]) * s.hkv + kv)
                << s.block_shift |
            within) *
           s.head_dim;
  }
};

// Every thread calls it; `table` is the shared memory for the paged entries.
__device__ inline DecodeCachePlace decode_cache_place(const DecodeRows& rows, const DecodeShape& s,
                                                      int slot, int kv, int begin, int end,
                                                      int* table) {
  DecodeCachePlace place;
  if (rows.block_table == nullptr) {
    place.head_base = cache_offset(rows, s, slot, kv, 0);
    return place;
  }
  place.table = table;
  place.first_block = begin >> s.block_shift;
  const int32_t* slot_table = rows.block_table + static_cast<size_t>(slot) * blocks_per_slot(s);
  for (int i = threadIdx.x; i <= ((end - 1) >> s.block_shift) - place.first_block; i += blockDim.x) {
    table[i] = slot_table[place.first_block + i];
  }
  __syncthreads();
  return place;
}

// The end of a block whose W warps left their states in shared memory
// (`shared`: acc [W][kHeads][D], then m [W][kHeads], then l [W][kHeads];
// a warp without positions leaves m = -FLT_MAX, l = 0). Every thread calls
// it. The block's state per (head, dim) is final when it is the row's only
// split; else it is published, and the row's last split to finish (an
// atomic count) merges them all in split order, so results are
// deterministic.
template <int kHeads>
__device__ inline void decode_attention_finish(const float* shared, int W, int r, int h0,
                                               int active, const DecodeShape& s,
                                               const DecodeSplits& split, Bf16Bits* y) {
  const int D = s.head_dim;
  const float* sm_acc = shared;
  const float* sm_m = shared + W * kHeads * D;
  const float* sm_l = sm_m + W * kHeads;
  __syncthreads();
  const size_t row_heads = static_cast<size_t>(r) * gridDim.y + blockIdx.y;
  const int stride = kHeads * (D + 2);
  float* mine = split.partials + (row_heads * gridDim.z + blockIdx.z) * stride;
  for (int i = threadIdx.x; i < kHeads * D; i += blockDim.x) {
    const int g = i / D, d = i % D;
    float M = -FLT_MAX, L = 0.0f, Y = 0.0f;
    for (int w = 0; w < W; ++w) M = fmaxf(M, sm_m[w * kHeads + g]);
    for (int w = 0; w < W; ++w) {
      const float mw = sm_m[w * kHeads + g];
      const float f = mw == -FLT_MAX ? 0.0f : __expf(mw - M);
      L += sm_l[w * kHeads + g] * f;
      Y += sm_acc[(w * kHeads + g) * D + d] * f;
    }
    if (active == 1) {
      y[(static_cast<size_t>(r) * s.hq + h0 + g) * D + d] = to_bf16_bits(Y / L);
    } else {
      mine[i] = Y;
      if (d == 0) mine[kHeads * D + g] = M, mine[kHeads * D + kHeads + g] = L;
    }
  }
  if (active == 1) return;
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(split.arrivals + row_heads, 1) == active - 1;
    if (last) split.arrivals[row_heads] = 0;  // ready for the next launch
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const float* first = split.partials + row_heads * gridDim.z * stride;
  for (int i = threadIdx.x; i < kHeads * D; i += blockDim.x) {
    const int g = i / D;
    float M = -FLT_MAX, L = 0.0f, Y = 0.0f;
    for (int z = 0; z < active; ++z) M = fmaxf(M, __ldcg(first + z * stride + kHeads * D + g));
    for (int z = 0; z < active; ++z) {
      const float* part_z = first + z * stride;
      const float f = __expf(__ldcg(part_z + kHeads * D + g) - M);
      L += __ldcg(part_z + kHeads * D + kHeads + g) * f;
      Y += __ldcg(part_z + i) * f;
    }
    y[(static_cast<size_t>(r) * s.hq + h0 + g) * D + i % D] = to_bf16_bits(Y / L);
  }
}

}  // namespace cohort::models::cuda
