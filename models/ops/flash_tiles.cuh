// The flash attention kernels' building blocks (flash_attention.cuh): mma
// fragments loaded from shared memory with ldmatrix, tile staging (bf16
// copies with cp.async, fp32 converted on the way), paired loads and stores
// of either element type, and the matrices' shape and strides.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "models/cuda/common.cuh"

namespace cohort::models::cuda {
namespace flash {

using bf16 = __nv_bfloat16;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kWarps = 4;
constexpr int kThreadsPerBlock = 32 * kWarps;


// A fragment (16 rows x 16 k) of a row-major [row][k] tile with stride ld.
__device__ inline void load_a(uint32_t a[4], const bf16* s, int ld, int row0, int k0) {
  const int lane = threadIdx.x & 31, m = lane >> 3, r = lane & 7;
  ldmatrix_x4(a, shared_address(s + (row0 + (m & 1) * 8 + r) * ld + k0 + (m >> 1) * 8));
}

// B fragments (16 k x 8 n) of n-tiles n0 and n0 + 8 from a tile stored
// [n][k] with stride ld (K for Q K^T: n = key, k = d).
__device__ inline void load_b2(uint32_t b0[2], uint32_t b1[2], const bf16* s, int ld, int n0, int k0) {
  const int lane = threadIdx.x & 31, m = lane >> 3, r = lane & 7;
  uint32_t f[4];
  ldmatrix_x4(f, shared_address(s + (n0 + (m >> 1) * 8 + r) * ld + k0 + (m & 1) * 8));
  b0[0] = f[0], b0[1] = f[1], b1[0] = f[2], b1[1] = f[3];
}

// The same from a tile stored [k][n] (V for P V: k = key, n = d),
// transposed on the way.
__device__ inline void load_b2_trans(uint32_t b0[2], uint32_t b1[2], const bf16* s, int ld, int n0, int k0) {
  const int lane = threadIdx.x & 31, m = lane >> 3, r = lane & 7;
  uint32_t f[4];
  ldmatrix_x4_trans(f, shared_address(s + (k0 + (m & 1) * 8 + r) * ld + n0 + (m >> 1) * 8));
  b0[0] = f[0], b0[1] = f[1], b1[0] = f[2], b1[1] = f[3];
}

// The A fragment of k-step j from accumulator tiles 2j and 2j+1 (the
// accumulator layout of m16n8 is the A layout of m16k16, half by half).
__device__ inline void accum_to_a(uint32_t a[4], const float c0[4], const float c1[4]) {
  a[0] = pack_bf16x2(c0[0], c0[1]);
  a[1] = pack_bf16x2(c0[2], c0[3]);
  a[2] = pack_bf16x2(c1[0], c1[1]);
  a[3] = pack_bf16x2(c1[2], c1[3]);
}

// Stages rows [row0, row0 + rows) of a [T, ld] fp32 or bf16 matrix (D
// columns from src) as bf16 into s [rows][lds]. Rows at or past T are zeros.
template <int D>
__device__ inline void stage(bf16* s, int lds, const float* src, int ld, int row0, int rows, int T) {
  constexpr int kVec = D / 4;
  for (int i = threadIdx.x; i < rows * kVec; i += kThreadsPerBlock) {
    const int r = i / kVec, c = (i % kVec) * 4;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (row0 + r < T) x = *reinterpret_cast<const float4*>(src + static_cast<size_t>(row0 + r) * ld + c);
    uint2 packed;
    packed.x = pack_bf16x2(x.x, x.y);
    packed.y = pack_bf16x2(x.z, x.w);
    *reinterpret_cast<uint2*>(s + r * lds + c) = packed;
  }
}

template <int D>
__device__ inline void stage(bf16* s, int lds, const bf16* src, int ld, int row0, int rows, int T) {
  constexpr int kVec = D / 8;
  for (int i = threadIdx.x; i < rows * kVec; i += kThreadsPerBlock) {
    const int r = i / kVec, c = (i % kVec) * 8;
    uint4 x = make_uint4(0, 0, 0, 0);
    if (row0 + r < T) x = *reinterpret_cast<const uint4*>(src + static_cast<size_t>(row0 + r) * ld + c);
    *reinterpret_cast<uint4*>(s + r * lds + c) = x;
  }
}

// Asynchronous staging (cp.async, common.cuh): a tile's copy is issued,
// later tiles' copies behind it. bf16 sources copy straight into shared
// memory; fp32 sources are converted on the way, so they stage
// synchronously (the double buffering is then only a layout).
__device__ inline void cp_async4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(dst))),
               "l"(src));
}

template <int D>
__device__ inline void stage_async(bf16* s, int lds, const float* src, int ld, int row0, int rows, int T) {
  stage<D>(s, lds, src, ld, row0, rows, T);
}

template <int D>
__device__ inline void stage_async(bf16* s, int lds, const bf16* src, int ld, int row0, int rows, int T) {
  constexpr int kVec = D / 8;
  for (int i = threadIdx.x; i < rows * kVec; i += kThreadsPerBlock) {
    const int r = i / kVec, c = (i % kVec) * 8;
    if (row0 + r < T) {
      cp_async16(s + r * lds + c, src + static_cast<size_t>(row0 + r) * ld + c);
    } else {
      *reinterpret_cast<uint4*>(s + r * lds + c) = make_uint4(0, 0, 0, 0);
    }
  }
}

// n floats from src[row0 ...] into s; rows at or past T get `pad`.
__device__ inline void stage_rows_async(float* s, const float* src, int row0, int n, int T, float pad) {
  for (int i = threadIdx.x; i < n; i += kThreadsPerBlock) {
    if (row0 + i < T) cp_async4(s + i, src + row0 + i);
    else s[i] = pad;
  }
}

__device__ inline float2 load_pair(const float* p) { return *reinterpret_cast<const float2*>(p); }
__device__ inline float2 load_pair(const bf16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}
// fp32 outputs accumulate (+=, the Backend contract); bf16 outputs are the
// fused blocks' own buffers and are overwritten.
__device__ inline void store_pair(float* p, float x, float y, bool accumulate) {
  float2* q = reinterpret_cast<float2*>(p);
  float2 o = accumulate ? *q : make_float2(0.f, 0.f);
  o.x += x;
  o.y += y;
  *q = o;
}
__device__ inline void store_pair(bf16* p, float x, float y, bool /*accumulate*/) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y);
}

// The online softmax of one key tile's scores s (a warp's 16 rows, the
// m16n8 accumulator layout) in place: scaled by scale2 (log2 units), the
// causal mask where `masked` (a key past row[r], each lane's two rows'
// positions), the running max m and sum l updated and o rescaled, s left
// holding the probabilities. kMaybeEmpty: a row may have seen no key yet
// (the keys split over blocks, one starting past it), so the state
// (-inf, 0) stays as it is; otherwise every row has a key in every tile
// it visits.
template <int D, int kKeys, bool kMaybeEmpty>
__device__ inline void online_softmax(float (&s)[kKeys / 8][4], float (&o)[D / 8][4], float (&m)[2], float (&l)[2],
                                      int key0, const int (&row)[2], bool masked, float scale2) {
  const int t = threadIdx.x & 3;
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = key0 + nt * 8 + 2 * t + (e & 1);
      float x = s[nt][e] * scale2;
      if (masked && key > row[e >> 1]) x = -INFINITY;
      s[nt][e] = x;
      mx[e >> 1] = fmaxf(mx[e >> 1], x);
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    const float m_new = fmaxf(m[r], mx[r]);
    const float alpha = kMaybeEmpty && m_new == -INFINITY ? 1.0f : exp2f(m[r] - m_new);
    m[r] = m_new;
    l[r] *= alpha;
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd) {
      o[nd][2 * r] *= alpha;
      o[nd][2 * r + 1] *= alpha;
    }
  }
#pragma unroll
  for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float mr = m[e >> 1];
      const float p = kMaybeEmpty && mr == -INFINITY ? 0.0f : exp2f(s[nt][e] - mr);
      s[nt][e] = p;
      l[e >> 1] += p;
    }
  }
}

// One key tile of a warp's 16 query rows in a flash forward: the scores
// on the tensor cores (q fragments qf against sK [kKeys][ld]), the online
// softmax above, then o += P·V from sV [kKeys][ld].
template <int D, int kKeys, bool kMaybeEmpty>
__device__ inline void attend_tile(float (&o)[D / 8][4], float (&m)[2], float (&l)[2],
                                   const uint32_t (&qf)[D / 16][4], const bf16* sK, const bf16* sV, int ld,
                                   int key0, const int (&row)[2], bool masked, float scale2) {
  float s[kKeys / 8][4] = {};
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; nt += 2) {
      uint32_t b0[2], b1[2];
      load_b2(b0, b1, sK, ld, nt * 8, kk * 16);
      mma(s[nt], qf[kk], b0);
      mma(s[nt + 1], qf[kk], b1);
    }
  }
  online_softmax<D, kKeys, kMaybeEmpty>(s, o, m, l, key0, row, masked, scale2);
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    uint32_t pa[4];
    accum_to_a(pa, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
    for (int nd = 0; nd < D / 8; nd += 2) {
      uint32_t b0[2], b1[2];
      load_b2_trans(b0, b1, sV, ld, nd * 8, kk * 16);
      mma(o[nd], pa, b0);
      mma(o[nd + 1], pa, b1);
    }
  }
}

// Two atoms' A fragments a0, a1 times two B fragments b0, b1 (n-tiles n
// and n + 1): c[atom][n-tile] += a · b, each fragment read once for two
// products.
__device__ inline void mma_2x2(float (&c00)[4], float (&c01)[4], float (&c10)[4], float (&c11)[4],
                               const uint32_t (&a0)[4], const uint32_t (&a1)[4], const uint32_t (&b0)[2],
                               const uint32_t (&b1)[2]) {
  mma(c00, a0, b0);
  mma(c01, a0, b1);
  mma(c10, a1, b0);
  mma(c11, a1, b1);
}

// attend_tile for a warp of 32 query rows, two 16-row atoms: rows
// [row0, row0 + 32) of sQ [rows][ldq], their fragments read from shared
// memory at each step (in registers they would not fit beside two atoms'
// outputs). Each key and value fragment read from shared memory feeds both
// atoms' products, half the reads per product of attend_tile's, which
// shared memory's bandwidth bounds at 16 rows a warp.
template <int D, int kKeys, bool kMaybeEmpty>
__device__ inline void attend_tile_pair(float (&o)[2][D / 8][4], float (&m)[2][2], float (&l)[2][2],
                                        const bf16* sQ, int ldq, int row0, const bf16* sK, const bf16* sV,
                                        int ld, int key0, const int (&row)[2][2], bool masked, float scale2) {
  float s[2][kKeys / 8][4] = {};
#pragma unroll 1
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a0[4], a1[4];
    load_a(a0, sQ, ldq, row0, kk * 16);
    load_a(a1, sQ, ldq, row0 + 16, kk * 16);
#pragma unroll
    for (int nt = 0; nt < kKeys / 8; nt += 2) {
      uint32_t b0[2], b1[2];
      load_b2(b0, b1, sK, ld, nt * 8, kk * 16);
      mma_2x2(s[0][nt], s[0][nt + 1], s[1][nt], s[1][nt + 1], a0, a1, b0, b1);
    }
  }
#pragma unroll
  for (int a = 0; a < 2; ++a) {
    online_softmax<D, kKeys, kMaybeEmpty>(s[a], o[a], m[a], l[a], key0, row[a], masked, scale2);
  }
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    uint32_t pa0[4], pa1[4];
    accum_to_a(pa0, s[0][2 * kk], s[0][2 * kk + 1]);
    accum_to_a(pa1, s[1][2 * kk], s[1][2 * kk + 1]);
#pragma unroll
    for (int nd = 0; nd < D / 8; nd += 2) {
      uint32_t b0[2], b1[2];
      load_b2_trans(b0, b1, sV, ld, nd * 8, kk * 16);
      mma_2x2(o[0][nd], o[0][nd + 1], o[1][nd], o[1][nd + 1], pa0, pa1, b0, b1);
    }
  }
}

// Row strides (elements) of the matrices: q and dq ldq, k, v, dk and dv
// ldk, y and dy ldo. Batch b's rows start at b * T * stride.
struct Shape {
  int T, heads, kv_heads;
  float scale;  // 1/sqrt(D)
  int ldq, ldk, ldo;
};

// Packed [B * T, heads * D] and [B * T, kv_heads * D] matrices.
inline Shape packed_shape(int T, int heads, int kv_heads, int D) {
  return {T, heads, kv_heads, 1.0f / sqrtf(float(D)), heads * D, kv_heads * D, heads * D};
}

}  // namespace flash
}  // namespace cohort::models::cuda
