// The fused decode-step attention's own q/k/v preparation (used by
// decode_attention.cuh): bias or per-head RMSNorm, RoPE and the KV-cache
// write of a row's new position, as qkv_rope_cache does them (rope.cuh).
#pragma once

#include "models/cuda/common.cuh"
#include "models/ops/decode_rows.h"
#include "models/ops/kv_fp8.cuh"

namespace cohort::models::cuda {

// The decode step's own q, k and v (fused form): the row's unnormalised
// projection with the bias or per-head norms and RoPE applied here, as
// qkv_rope_cache does it (rope.cuh). Threads i < D/2 hold the pairs
// (i, i + D/2). The block's kHeads query heads go to shared memory in fp32,
// k and v in bf16 (what the cache holds; an fp8 cache's codes read back,
// exact in bf16: kv_fp8.h); one block of each (row, KV head) writes them to
// the cache. Every thread of the block calls it (the norms
// are block sums).
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
template <int kHeads>
struct DecodeQkvConstants {
  float q_bias[kHeads][2] = {};
  float kv_bias[4] = {};  // k, k + half, v, v + half
  float q_norm[2] = {1.0f, 1.0f}, k_norm[2] = {1.0f, 1.0f};
  float cos = 1.0f, sin = 0.0f;
};

// The block's heads: query heads h0 .. h0 + kHeads - 1 of KV head kv.
template <int kHeads>
__device__ inline DecodeQkvConstants<kHeads> decode_own_constants(const DecodeQkv& in,
                                                                  const DecodeRows& rows,
                                                                  const DecodeShape& s, int r,
                                                                  int h0, int kv) {
  DecodeQkvConstants<kHeads> c;
  const int D = s.head_dim, half = D / 2, i = threadIdx.x;
  if (i >= half) return c;
  const int kc = (s.hq + kv) * D, vc = (s.hq + s.hkv + kv) * D;
  if (in.bias) {
#pragma unroll
    for (int g = 0; g < kHeads; ++g) {
      const int qc = (h0 + g) * D;
      c.q_bias[g][0] = __ldg(in.bias + qc + i), c.q_bias[g][1] = __ldg(in.bias + qc + i + half);
    }
    c.kv_bias[0] = __ldg(in.bias + kc + i), c.kv_bias[1] = __ldg(in.bias + kc + i + half);
    c.kv_bias[2] = __ldg(in.bias + vc + i), c.kv_bias[3] = __ldg(in.bias + vc + i + half);
  }
  if (in.q_norm) c.q_norm[0] = __ldg(in.q_norm + i), c.q_norm[1] = __ldg(in.q_norm + i + half);
  if (in.k_norm) c.k_norm[0] = __ldg(in.k_norm + i), c.k_norm[1] = __ldg(in.k_norm + i + half);
  const size_t at = static_cast<size_t>(rows.positions[r]) * half + i;
  c.cos = __ldg(in.rope_cos + at), c.sin = __ldg(in.rope_sin + at);
  return c;
}

template <int kHeads, bool kFp8>
__device__ inline void decode_own_qkv(const DecodeQkv& in, const DecodeQkvConstants<kHeads>& c,
                                      const DecodeRows& rows, const DecodeShape& s, int r, int h0,
                                      int kv, bool write_cache, float* sq, Bf16Bits* sk,
                                      Bf16Bits* sv, const KvView& cache) {
  const int D = s.head_dim, half = D / 2, i = threadIdx.x;
  const bool active = i < half;
  const float* row = in.qkv + static_cast<size_t>(r) * (s.hq + 2 * s.hkv) * D;
  const int kc = (s.hq + kv) * D, vc = (s.hq + s.hkv + kv) * D;
  float qa[kHeads] = {}, qb[kHeads] = {}, ka = 0, kb = 0, va = 0, vb = 0;
  if (active) {
#pragma unroll
    for (int g = 0; g < kHeads; ++g) {
      const int qc = (h0 + g) * D;
      qa[g] = row[qc + i] + c.q_bias[g][0], qb[g] = row[qc + i + half] + c.q_bias[g][1];
    }
    ka = row[kc + i] + c.kv_bias[0], kb = row[kc + i + half] + c.kv_bias[1];
    va = row[vc + i] + c.kv_bias[2], vb = row[vc + i + half] + c.kv_bias[3];
  }
  if (in.q_norm || in.k_norm) {  // uniform across the block: the barriers inside are safe
    float ss[kHeads + 1];
#pragma unroll
    for (int g = 0; g < kHeads; ++g) ss[g] = qa[g] * qa[g] + qb[g] * qb[g];
    ss[kHeads] = ka * ka + kb * kb;
    block_reduce_each<false>(ss);
    if (in.q_norm && active) {
#pragma unroll
      for (int g = 0; g < kHeads; ++g) {
        const float rq = rsqrtf(ss[g] / static_cast<float>(D) + s.eps);
        qa[g] = c.q_norm[0] * (qa[g] * rq), qb[g] = c.q_norm[1] * (qb[g] * rq);
      }
    }
    if (in.k_norm && active) {
      const float rk = rsqrtf(ss[kHeads] / static_cast<float>(D) + s.eps);
      ka = c.k_norm[0] * (ka * rk), kb = c.k_norm[1] * (kb * rk);
    }
  }
  if (!active) return;
#pragma unroll
  for (int g = 0; g < kHeads; ++g) {
    sq[g * D + i] = qa[g] * c.cos - qb[g] * c.sin, sq[g * D + i + half] = qb[g] * c.cos + qa[g] * c.sin;
  }
  const float kx = ka * c.cos - kb * c.sin, ky = kb * c.cos + ka * c.sin;
  const size_t at = write_cache ? cache_offset(rows, s, rows.slots[r], kv, rows.positions[r]) : 0;
  if constexpr (kFp8) {
    const KvScales scale = kv_scales(cache, s.hkv, kv);
    const uint8_t k0 = kv_fp8_code(kx, scale.k), k1 = kv_fp8_code(ky, scale.k);
    const uint8_t v0 = kv_fp8_code(va, scale.v), v1 = kv_fp8_code(vb, scale.v);
    sk[i] = to_bf16_bits(kv_fp8_value(k0, scale.k)), sk[i + half] = to_bf16_bits(kv_fp8_value(k1, scale.k));
    sv[i] = to_bf16_bits(kv_fp8_value(v0, scale.v)), sv[i + half] = to_bf16_bits(kv_fp8_value(v1, scale.v));
    if (write_cache) {
      uint8_t* kc8 = static_cast<uint8_t*>(cache.k) + at;
      uint8_t* vc8 = static_cast<uint8_t*>(cache.v) + at;
      kc8[i] = k0, kc8[i + half] = k1, vc8[i] = v0, vc8[i + half] = v1;
    }
  } else {
    const Bf16Bits k0 = to_bf16_bits(kx), k1 = to_bf16_bits(ky);
    const Bf16Bits v0 = to_bf16_bits(va), v1 = to_bf16_bits(vb);
    sk[i] = k0, sk[i + half] = k1, sv[i] = v0, sv[i + half] = v1;
    if (write_cache) {
      Bf16Bits* kc16 = static_cast<Bf16Bits*>(cache.k) + at;
      Bf16Bits* vc16 = static_cast<Bf16Bits*>(cache.v) + at;
      kc16[i] = k0, kc16[i + half] = k1, vc16[i] = v0, vc16[i + half] = v1;
    }
  }
}

}  // namespace cohort::models::cuda
