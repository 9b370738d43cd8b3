// CUDA RoPE (CPU reference and contract: rope.h): one thread per rotated
// pair (token, head, i < D/2), in place; sign -1 applies the inverse.
// The decode engine's qkv_rope_cache: one warp per (row, head), the
// per-head norm a warp sum.
#pragma once

#include "models/cuda/common.cuh"
#include "models/ops/kv_fp8.cuh"
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

// One warp per (row, head): lane j holds the pairs (j + 32k, j + 32k + D/2),
// so a warp's loads are contiguous and the norm's sum is a warp sum, with no
// block barrier (a prefill of thousands of rows launches n × heads warps,
// not that many small blocks). kFp8: the cache holds e4m3 codes (kv_fp8.h).
constexpr int kQkvRopeWarps = 8;
constexpr int kQkvRopeMaxPairs = 4;  // head_dim up to 256

template <bool kFp8>
__global__ void __launch_bounds__(32 * kQkvRopeWarps)
    qkv_rope_cache_kernel(const float* qkv, const float* bias, const float* q_norm, const float* k_norm,
                          const float* rope_cos, const float* rope_sin, DecodeRows rows, DecodeShape s, int n,
                          float* q_out, KvView kv_cache) {
  begin_dependent();
  const int heads = s.hq + 2 * s.hkv, D = s.head_dim, half = D / 2;
  const int job = blockIdx.x * kQkvRopeWarps + threadIdx.x / 32, lane = threadIdx.x & 31;
  const int r = job / heads, head = job % heads;
  if (r >= n) return;  // whole warps leave: no barrier below
  const size_t ld = static_cast<size_t>(heads) * D;
  const size_t col = static_cast<size_t>(head) * D;
  const float* src = qkv + r * ld + col;
  float a[kQkvRopeMaxPairs], b[kQkvRopeMaxPairs];
  float sumsq = 0.0f;
#pragma unroll
  for (int k = 0; k < kQkvRopeMaxPairs; ++k) {
    const int i = lane + 32 * k;
    a[k] = b[k] = 0.0f;
    if (i < half) {
      a[k] = src[i], b[k] = src[i + half];
      if (bias) a[k] += bias[col + i], b[k] += bias[col + i + half];
      sumsq += a[k] * a[k] + b[k] * b[k];
    }
  }
  const int pos = rows.positions[r], slot = rows.slots[r];
  const bool is_q = head < s.hq, is_k = !is_q && head < s.hq + s.hkv;
  const float* norm = is_q ? q_norm : (is_k ? k_norm : nullptr);
  const float rstd = norm ? rsqrtf(warp_sum(sumsq) / static_cast<float>(D) + s.eps) : 1.0f;
  const int kv = is_k ? head - s.hq : head - s.hq - s.hkv;
  const size_t at = is_q ? 0 : cache_offset(rows, s, slot, kv, pos);
  Bf16Bits* cache = is_q || kFp8 ? nullptr : static_cast<Bf16Bits*>(is_k ? kv_cache.k : kv_cache.v) + at;
  uint8_t* codes = is_q || !kFp8 ? nullptr : static_cast<uint8_t*>(is_k ? kv_cache.k : kv_cache.v) + at;
  const float scale = kFp8 && !is_q ? __ldg(kv_cache.fp8_scales + (is_k ? 0 : s.hkv) + kv) : 1.0f;
  float largest = 0.0f;  // of |value| over this lane's K/V writes
  float* q_dst = is_q ? q_out + (static_cast<size_t>(r) * s.hq + head) * D : nullptr;
#pragma unroll
  for (int k = 0; k < kQkvRopeMaxPairs; ++k) {
    const int i = lane + 32 * k;
    if (i >= half) break;
    float x = a[k], y = b[k];
    if (norm) x = norm[i] * (x * rstd), y = norm[i + half] * (y * rstd);
    if (is_q || is_k) {
      const float c = rope_cos[static_cast<size_t>(pos) * half + i];
      const float sn = rope_sin[static_cast<size_t>(pos) * half + i];
      const float rx = x * c - y * sn, ry = y * c + x * sn;
      x = rx, y = ry;
    }
    if (is_q) {
      q_dst[i] = x, q_dst[i + half] = y;
    } else if constexpr (kFp8) {
      codes[i] = kv_fp8_code(x, scale), codes[i + half] = kv_fp8_code(y, scale);
      largest = fmaxf(largest, fmaxf(fabsf(x), fabsf(y)));
    } else {
      cache[i] = to_bf16_bits(x), cache[i + half] = to_bf16_bits(y);
      largest = fmaxf(largest, fmaxf(fabsf(x), fabsf(y)));
    }
  }
  if (kv_cache.amax != nullptr && !is_q) {  // the whole warp: the head is the warp's
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, o));
    if (lane == 0) raise_amax(kv_cache.amax + (is_k ? 0 : s.hkv) + kv, largest);
  }
}

void qkv_rope_cache(float* q_out, const KvView& cache, const float* qkv, const float* qkv_bias,
                    const float* q_norm, const float* k_norm, const float* cos, const float* sin,
                    DecodeRows rows, int n, const DecodeShape& shape, CUstream_st* stream) {
  const int64_t jobs = static_cast<int64_t>(n) * (shape.hq + 2 * shape.hkv);
  const int blocks = static_cast<int>((jobs + kQkvRopeWarps - 1) / kQkvRopeWarps);
  const auto kernel = cache.fp8() ? qkv_rope_cache_kernel<true> : qkv_rope_cache_kernel<false>;
  launch_dependent(kernel, dim3(blocks), dim3(32 * kQkvRopeWarps), 0, stream, qkv, qkv_bias, q_norm, k_norm, cos,
                   sin, rows, shape, n, q_out, cache);
}

void qkv_rope_cache(float* q_out, Bf16Bits* k_cache, Bf16Bits* v_cache, const float* qkv,
                    const float* qkv_bias, const float* q_norm, const float* k_norm,
                    const float* cos, const float* sin, DecodeRows rows, int n,
                    const DecodeShape& shape, CUstream_st* stream) {
  qkv_rope_cache(q_out, KvView{k_cache, v_cache}, qkv, qkv_bias, q_norm, k_norm, cos, sin, rows, n, shape,
                 stream);
}

}  // namespace cohort::models::cuda
