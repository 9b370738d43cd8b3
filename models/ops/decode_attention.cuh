// CUDA decode attention (CPU reference and contract: decode_attention.h).
// One block of 8 warps per (row, query head). A cache position is handled by
// D / 16 lanes (16 dims each, loaded as two 16-byte vectors), so a warp
// holds 32 / (D / 16) lane groups, and each group takes
// kDecodePositionsPerGroup positions a round with all their loads in flight
// together (a decode step is bound by memory latency, not bandwidth, at
// contexts of a few hundred positions). Every lane group keeps an online
// softmax state (max, sum, accumulator) in fp32, merged at the end within
// the warp (shuffles) and across warps (shared memory). The merge order is
// fixed, so results are deterministic.
#pragma once

#include <cfloat>

#include "models/cuda/common.cuh"
#include "models/ops/decode_attention.h"

namespace cohort::models::cuda {

constexpr int kDecodeAttnWarps = 8;
constexpr int kDecodeDimsPerLane = 16;
constexpr int kDecodePositionsPerGroup = 4;

// The 16 bf16 of two 16-byte vectors as floats.
__device__ __forceinline__ void unpack16_bf16(const uint4 (&w)[2], float* out) {
  unpack8_bf16(w[0], out);
  unpack8_bf16(w[1], out + 8);
}

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

// The decode step's own q, k and v (fused form): the row's unnormalised
// projection with the bias or per-head norms and RoPE applied here, as
// qkv_rope_cache does it (rope.cuh). Threads i < D/2 hold the pairs
// (i, i + D/2). q goes to shared memory in fp32, k and v in bf16 (what the
// cache holds), and the first q head of each KV group writes them to the
// cache. Every thread of the block calls it (the norms are block sums).
struct DecodeQkv {
  const float* qkv = nullptr;  // [n, (hq + 2 hkv) D]
  const float* bias = nullptr;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  const float* rope_cos = nullptr;
  const float* rope_sin = nullptr;
};

// What decode_own_qkv needs besides the projection: model weights and the
// RoPE table at the row's position, none of which a kernel writes, so they
// are loaded before the wait on the predecessor.
struct DecodeQkvConstants {
  float bias[6] = {};  // q, q + half, k, k + half, v, v + half
  float q_norm[2] = {1.0f, 1.0f}, k_norm[2] = {1.0f, 1.0f};
  float cos = 1.0f, sin = 0.0f;
};

__device__ inline DecodeQkvConstants decode_own_constants(const DecodeQkv& in, const DecodeRows& rows,
                                                          const DecodeShape& s, int r, int h, int kv) {
  DecodeQkvConstants c;
  const int D = s.head_dim, half = D / 2, i = threadIdx.x;
  if (i >= half) return c;
  const int qc = h * D, kc = (s.hq + kv) * D, vc = (s.hq + s.hkv + kv) * D;
  if (in.bias) {
    c.bias[0] = __ldg(in.bias + qc + i), c.bias[1] = __ldg(in.bias + qc + i + half);
    c.bias[2] = __ldg(in.bias + kc + i), c.bias[3] = __ldg(in.bias + kc + i + half);
    c.bias[4] = __ldg(in.bias + vc + i), c.bias[5] = __ldg(in.bias + vc + i + half);
  }
  if (in.q_norm) c.q_norm[0] = __ldg(in.q_norm + i), c.q_norm[1] = __ldg(in.q_norm + i + half);
  if (in.k_norm) c.k_norm[0] = __ldg(in.k_norm + i), c.k_norm[1] = __ldg(in.k_norm + i + half);
  const size_t at = static_cast<size_t>(rows.positions[r]) * half + i;
  c.cos = __ldg(in.rope_cos + at), c.sin = __ldg(in.rope_sin + at);
  return c;
}

__device__ inline void decode_own_qkv(const DecodeQkv& in, const DecodeQkvConstants& c,
                                      const DecodeRows& rows, const DecodeShape& s, int r, int h,
                                      int kv, float* sq, Bf16Bits* sk, Bf16Bits* sv,
                                      Bf16Bits* k_cache, Bf16Bits* v_cache) {
  const int D = s.head_dim, half = D / 2, i = threadIdx.x;
  const bool active = i < half;
  const int pos = rows.positions[r];
  const float* row = in.qkv + static_cast<size_t>(r) * (s.hq + 2 * s.hkv) * D;
  const int qc = h * D, kc = (s.hq + kv) * D, vc = (s.hq + s.hkv + kv) * D;
  float qa = 0, qb = 0, ka = 0, kb = 0, va = 0, vb = 0;
  if (active) {
    qa = row[qc + i] + c.bias[0], qb = row[qc + i + half] + c.bias[1];
    ka = row[kc + i] + c.bias[2], kb = row[kc + i + half] + c.bias[3];
    va = row[vc + i] + c.bias[4], vb = row[vc + i + half] + c.bias[5];
  }
  if (in.q_norm || in.k_norm) {  // uniform across the block: the barriers inside are safe
    float ss[2] = {qa * qa + qb * qb, ka * ka + kb * kb};
    block_reduce_each<false>(ss);
    if (in.q_norm && active) {
      const float rq = rsqrtf(ss[0] / static_cast<float>(D) + s.eps);
      qa = c.q_norm[0] * (qa * rq), qb = c.q_norm[1] * (qb * rq);
    }
    if (in.k_norm && active) {
      const float rk = rsqrtf(ss[1] / static_cast<float>(D) + s.eps);
      ka = c.k_norm[0] * (ka * rk), kb = c.k_norm[1] * (kb * rk);
    }
  }
  if (!active) return;
  sq[i] = qa * c.cos - qb * c.sin, sq[i + half] = qb * c.cos + qa * c.sin;
  const Bf16Bits k0 = to_bf16_bits(ka * c.cos - kb * c.sin), k1 = to_bf16_bits(kb * c.cos + ka * c.sin);
  const Bf16Bits v0 = to_bf16_bits(va), v1 = to_bf16_bits(vb);
  sk[i] = k0, sk[i + half] = k1, sv[i] = v0, sv[i + half] = v1;
  if (h % (s.hq / s.hkv) == 0) {
    const size_t at = cache_offset(rows, s, rows.slots[r], kv, pos);
    k_cache[at + i] = k0, k_cache[at + i + half] = k1;
    v_cache[at + i] = v0, v_cache[at + i + half] = v1;
  }
}

// kFused: the decode-step form (decode_attention_fused); else q comes
// ready from qkv_rope_cache and the row's own position from the cache.
// At most 128 registers, so that two blocks share a multiprocessor: at
// decode batches of dozens of rows the grid is several waves deep, and one
// block a multiprocessor (129 registers are enough for that) doubles them.
template <bool kFused>
__global__ void __launch_bounds__(32 * kDecodeAttnWarps, 2) decode_attention_kernel(const float* q, DecodeQkv own, Bf16Bits* k_cache,
                                        Bf16Bits* v_cache, DecodeRows rows, DecodeShape s,
                                        Bf16Bits* y) {
  const int r = blockIdx.x, h = blockIdx.y, D = s.head_dim;
  const int lanes = D / kDecodeDimsPerLane, per_warp = 32 / lanes;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = lane / lanes, sub = lane % lanes;
  const int groups = kDecodeAttnWarps * per_warp, my_group = warp * per_warp + group;
  const int span = kDecodePositionsPerGroup * groups;  // positions a round
  // Row indices were copied in before the step's first kernel, and in the
  // fused form every cached position below the row's own was written by an
  // earlier step: both may be read before the wait on the predecessor.
  const int kv = h / (s.hq / s.hkv), pos = rows.positions[r];
  const int slot = rows.slots[r];
  const bool paged = rows.block_table != nullptr;
  // Contiguous: the slot's head is one run of positions.
  const size_t head_base = paged ? 0 : cache_offset(rows, s, slot, kv, 0);
  extern __shared__ float shared[];  // [warps][D] acc, [warps] m, [warps] l; fused: q, k, v
  float* sq = shared + kDecodeAttnWarps * (D + 2);
  Bf16Bits* sk = reinterpret_cast<Bf16Bits*>(sq + D);
  Bf16Bits* sv = sk + D;
  // Each lane group takes kDecodePositionsPerGroup positions a round,
  // interleaved with the other groups' (neighbouring groups read
  // neighbouring positions), and loads all of their K and V before using
  // any: one memory round trip a round, where a round covers 128 positions
  // at head_dim 128.
  uint4 kraw[kDecodePositionsPerGroup][2], vraw[kDecodePositionsPerGroup][2];
  auto load_round = [&](int base) {
#pragma unroll
    for (int u = 0; u < kDecodePositionsPerGroup; ++u) {
      const int t = base + u * groups + my_group;
      if (t < pos || (!kFused && t == pos)) {
        const size_t at = (paged ? cache_offset(rows, s, slot, kv, t)
                                 : head_base + static_cast<size_t>(t) * D) +
                          sub * kDecodeDimsPerLane;
        const uint4* kp = reinterpret_cast<const uint4*>(k_cache + at);
        const uint4* vp = reinterpret_cast<const uint4*>(v_cache + at);
        kraw[u][0] = kp[0], kraw[u][1] = kp[1], vraw[u][0] = vp[0], vraw[u][1] = vp[1];
      } else {
        kraw[u][0] = kraw[u][1] = make_uint4(0, 0, 0, 0);
      }
    }
  };
  DecodeQkvConstants constants;
  if constexpr (kFused) {
    load_round(0);
    constants = decode_own_constants(own, rows, s, r, h, kv);
  }
  begin_dependent();
  const float scale = rsqrtf(static_cast<float>(D));
  float qv[kDecodeDimsPerLane], acc[kDecodeDimsPerLane];
  if constexpr (kFused) {
    decode_own_qkv(own, constants, rows, s, r, h, kv, sq, sk, sv, k_cache, v_cache);
    __syncthreads();
    for (int k = 0; k < kDecodeDimsPerLane; ++k) qv[k] = sq[sub * kDecodeDimsPerLane + k] * scale;
  } else {
    const float* qrow = q + (static_cast<size_t>(r) * s.hq + h) * D + sub * kDecodeDimsPerLane;
    for (int k = 0; k < kDecodeDimsPerLane; ++k) qv[k] = qrow[k] * scale;
    load_round(0);
  }
  for (int k = 0; k < kDecodeDimsPerLane; ++k) acc[k] = 0.0f;
  float m = -FLT_MAX, l = 0.0f;
  for (int base = 0; base <= pos; base += span) {
    if (base > 0) load_round(base);
    if constexpr (kFused) {  // the row's own position, from shared memory
#pragma unroll
      for (int u = 0; u < kDecodePositionsPerGroup; ++u) {
        if (base + u * groups + my_group == pos) {
          const uint4* kp = reinterpret_cast<const uint4*>(sk + sub * kDecodeDimsPerLane);
          const uint4* vp = reinterpret_cast<const uint4*>(sv + sub * kDecodeDimsPerLane);
          kraw[u][0] = kp[0], kraw[u][1] = kp[1], vraw[u][0] = vp[0], vraw[u][1] = vp[1];
        }
      }
    }
    float dot[kDecodePositionsPerGroup];
    float M = m;
#pragma unroll
    for (int u = 0; u < kDecodePositionsPerGroup; ++u) {
      float kf[kDecodeDimsPerLane];
      unpack16_bf16(kraw[u], kf);
      float d = 0.0f;
      for (int k = 0; k < kDecodeDimsPerLane; ++k) d += qv[k] * kf[k];
      for (int o = lanes / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
      dot[u] = d;
      if (base + u * groups + my_group <= pos) M = fmaxf(M, d);
    }
    if (base + my_group > pos) continue;  // none of this round's positions is ours
    const float corr = __expf(m - M);
    l *= corr;
    for (int k = 0; k < kDecodeDimsPerLane; ++k) acc[k] *= corr;
#pragma unroll
    for (int u = 0; u < kDecodePositionsPerGroup; ++u) {
      if (base + u * groups + my_group > pos) break;
      float vf[kDecodeDimsPerLane];
      unpack16_bf16(vraw[u], vf);
      const float p = __expf(dot[u] - M);
      l += p;
      for (int k = 0; k < kDecodeDimsPerLane; ++k) acc[k] = fmaf(p, vf[k], acc[k]);
    }
    m = M;
  }
  for (int o = lanes; o < 32; o <<= 1) {  // groups holding the same dims
    float other[kDecodeDimsPerLane];
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), l2 = __shfl_xor_sync(0xffffffffu, l, o);
    for (int k = 0; k < kDecodeDimsPerLane; ++k) other[k] = __shfl_xor_sync(0xffffffffu, acc[k], o);
    merge_softmax_state(m, l, acc, m2, l2, other);
  }
  float* sm_acc = shared;
  float* sm_m = shared + kDecodeAttnWarps * D;
  float* sm_l = sm_m + kDecodeAttnWarps;
  if (group == 0) {
    for (int k = 0; k < kDecodeDimsPerLane; ++k) {
      sm_acc[warp * D + sub * kDecodeDimsPerLane + k] = acc[k];
    }
    if (sub == 0) sm_m[warp] = m, sm_l[warp] = l;
  }
  __syncthreads();
  float M = -FLT_MAX;
  for (int w = 0; w < kDecodeAttnWarps; ++w) M = fmaxf(M, sm_m[w]);
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float L = 0.0f, Y = 0.0f;
    for (int w = 0; w < kDecodeAttnWarps; ++w) {
      const float f = sm_m[w] == -FLT_MAX ? 0.0f : __expf(sm_m[w] - M);
      L += sm_l[w] * f;
      Y += sm_acc[w * D + d] * f;
    }
    y[(static_cast<size_t>(r) * s.hq + h) * D + d] = to_bf16_bits(Y / L);
  }
}

inline size_t decode_attention_shared_bytes(int head_dim, bool fused) {
  return sizeof(float) * kDecodeAttnWarps * (head_dim + 2) +
         (fused ? sizeof(float) * head_dim + 2 * sizeof(Bf16Bits) * head_dim : 0);
}

void decode_attention(Bf16Bits* y, const float* q, const Bf16Bits* k_cache,
                      const Bf16Bits* v_cache, DecodeRows rows, int n, const DecodeShape& shape,
                      CUstream_st* stream) {
  const dim3 grid(n, shape.hq);
  // The plain form only reads the cache.
  launch_dependent(decode_attention_kernel<false>, grid, kDecodeAttnWarps * 32,
                   decode_attention_shared_bytes(shape.head_dim, false), stream, q, DecodeQkv{},
                   const_cast<Bf16Bits*>(k_cache), const_cast<Bf16Bits*>(v_cache), rows, shape, y);
}

void decode_attention_fused(Bf16Bits* y, Bf16Bits* k_cache, Bf16Bits* v_cache, const float* qkv,
                            const float* qkv_bias, const float* q_norm, const float* k_norm,
                            const float* cos, const float* sin, DecodeRows rows, int n,
                            const DecodeShape& shape, CUstream_st* stream) {
  const dim3 grid(n, shape.hq);
  const DecodeQkv own{qkv, qkv_bias, q_norm, k_norm, cos, sin};
  launch_dependent(decode_attention_kernel<true>, grid, kDecodeAttnWarps * 32,
                   decode_attention_shared_bytes(shape.head_dim, true), stream,
                   static_cast<const float*>(nullptr), own, k_cache, v_cache, rows, shape, y);
}

}  // namespace cohort::models::cuda
