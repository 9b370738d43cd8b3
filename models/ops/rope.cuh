// CUDA RoPE (CPU reference and contract: rope.h): one thread per rotated
// pair (token, head, i < D/2), in place; sign -1 applies the inverse.
// The decode engine's qkv_rope_cache: one block per (row, head), thread
// i < D/2 holding elements i and i + D/2, the per-head norm a block sum.
#pragma once

#include "models/cuda/common.cuh"
#include "models/ops/rope.h"

namespace cohort::models::cuda {

__global__ void rope_kernel(float* x, const int32_t* pos, int n, int heads, int head_dim,
                            const float* cos, const float* sin, float sign) {
  const int half = head_dim / 2;
  const size_t total = static_cast<size_t>(n) * heads * half;
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(idx % half);
    const size_t th = idx / half;  // token * heads + head
    const int t = static_cast<int>(th / heads);
    const float c = cos[static_cast<size_t>(pos[t]) * half + i];
    const float s = sin[static_cast<size_t>(pos[t]) * half + i];
    float* v = x + th * head_dim;
    const float a = v[i], b = v[i + half];
    v[i] = a * c - sign * b * s;
    v[i + half] = b * c + sign * a * s;
  }
}

__global__ void qkv_rope_cache_kernel(const float* qkv, const float* bias, const float* q_norm,
                                      const float* k_norm, const float* rope_cos,
                                      const float* rope_sin, DecodeRows rows, DecodeShape s,
                                      float* q_out, Bf16Bits* k_cache, Bf16Bits* v_cache) {
  begin_dependent();
  const int r = blockIdx.x, head = blockIdx.y, D = s.head_dim, half = D / 2;
  const int i = threadIdx.x;
  const bool active = i < half;
  const size_t ld = static_cast<size_t>(s.hq + 2 * s.hkv) * D;
  const size_t col = static_cast<size_t>(head) * D;
  const float* src = qkv + r * ld + col;
  float a = active ? src[i] : 0.0f, b = active ? src[i + half] : 0.0f;
  if (bias && active) a += bias[col + i], b += bias[col + i + half];
  const int pos = rows.positions[r], slot = rows.slots[r];
  const bool is_q = head < s.hq, is_k = !is_q && head < s.hq + s.hkv;
  const float* norm = is_q ? q_norm : (is_k ? k_norm : nullptr);
  if (norm) {  // uniform across the block: the barriers inside are safe
    const float rstd = rsqrtf(block_reduce<false>(a * a + b * b) / static_cast<float>(D) + s.eps);
    if (active) a = norm[i] * (a * rstd), b = norm[i + half] * (b * rstd);
  }
  if (!active) return;
  if (is_q || is_k) {
    const float c = rope_cos[static_cast<size_t>(pos) * half + i];
    const float sn = rope_sin[static_cast<size_t>(pos) * half + i];
    const float ra = a * c - b * sn, rb = b * c + a * sn;
    a = ra, b = rb;
  }
  if (is_q) {
    float* dst = q_out + (static_cast<size_t>(r) * s.hq + head) * D;
    dst[i] = a, dst[i + half] = b;
    return;
  }
  const int kv = is_k ? head - s.hq : head - s.hq - s.hkv;
  Bf16Bits* cache = is_k ? k_cache : v_cache;
  Bf16Bits* dst = cache + cache_offset(rows, s, slot, kv, pos);
  dst[i] = to_bf16_bits(a), dst[i + half] = to_bf16_bits(b);
}

void qkv_rope_cache(float* q_out, Bf16Bits* k_cache, Bf16Bits* v_cache, const float* qkv,
                    const float* qkv_bias, const float* q_norm, const float* k_norm,
                    const float* cos, const float* sin, DecodeRows rows, int n,
                    const DecodeShape& shape, CUstream_st* stream) {
  const dim3 grid(n, shape.hq + 2 * shape.hkv);
  const int threads = ((shape.head_dim / 2 + 31) / 32) * 32;
  launch_dependent(qkv_rope_cache_kernel, grid, threads, 0, stream, qkv, qkv_bias, q_norm, k_norm, cos, sin,
                                                      rows, shape, q_out, k_cache, v_cache);
}

}  // namespace cohort::models::cuda
