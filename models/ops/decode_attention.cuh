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
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(w);
  for (int k = 0; k < 8; ++k) {
    const float2 f = __bfloat1622float2(h[k]);
    out[2 * k] = f.x, out[2 * k + 1] = f.y;
  }
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

__global__ void decode_attention_kernel(const float* q, const Bf16Bits* k_cache,
                                        const Bf16Bits* v_cache, DecodeRows rows, DecodeShape s,
                                        Bf16Bits* y) {
  begin_dependent();
  const int r = blockIdx.x, h = blockIdx.y, D = s.head_dim;
  const int lanes = D / kDecodeDimsPerLane, per_warp = 32 / lanes;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = lane / lanes, sub = lane % lanes;
  const int groups = kDecodeAttnWarps * per_warp, my_group = warp * per_warp + group;
  const int kv = h / (s.hq / s.hkv), pos = rows.positions[r];
  const int slot = rows.slots[r];
  const bool paged = rows.block_table != nullptr;
  // Contiguous: the slot's head is one run of positions.
  const size_t head_base = paged ? 0 : cache_offset(rows, s, slot, kv, 0);
  const float scale = rsqrtf(static_cast<float>(D));
  float qv[kDecodeDimsPerLane], acc[kDecodeDimsPerLane];
  const float* qrow = q + (static_cast<size_t>(r) * s.hq + h) * D + sub * kDecodeDimsPerLane;
  for (int k = 0; k < kDecodeDimsPerLane; ++k) qv[k] = qrow[k] * scale, acc[k] = 0.0f;
  float m = -FLT_MAX, l = 0.0f;
  // Each lane group takes kDecodePositionsPerGroup positions a round,
  // interleaved with the other groups' (neighbouring groups read
  // neighbouring positions), and loads all of their K and V before using
  // any: one memory round trip a round, where a round covers 128 positions
  // at head_dim 128.
  for (int base = 0; base <= pos; base += kDecodePositionsPerGroup * groups) {
    uint4 kraw[kDecodePositionsPerGroup][2], vraw[kDecodePositionsPerGroup][2];
#pragma unroll
    for (int u = 0; u < kDecodePositionsPerGroup; ++u) {
      const int t = base + u * groups + my_group;
      if (t <= pos) {
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
  extern __shared__ float shared[];  // [warps][D] acc, then [warps] m, [warps] l
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

void decode_attention(Bf16Bits* y, const float* q, const Bf16Bits* k_cache,
                      const Bf16Bits* v_cache, DecodeRows rows, int n, const DecodeShape& shape,
                      CUstream_st* stream) {
  const dim3 grid(n, shape.hq);
  const size_t smem = sizeof(float) * kDecodeAttnWarps * (shape.head_dim + 2);
  launch_dependent(decode_attention_kernel, grid, kDecodeAttnWarps * 32, smem, stream, q, k_cache, v_cache,
                                                                         rows, shape, y);
}

}  // namespace cohort::models::cuda
