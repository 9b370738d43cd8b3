// The fused training blocks' elementwise kernels (models/block_engine.h):
// bf16 activations in memory, fp32 arithmetic. Each computes what a run of
// the op-by-op path's ops computes (rmsnorm.h, rope.h, swiglu.h, the
// residual add), rounding once where that path rounds a GEMM operand, so
// the op-by-op path on the CPU reference backend is their reference; the
// GPU test tests/models/train_blocks_gpu_test.cc compares the two on random
// weights, every gradient included.
//
// Included by models/cuda/train_blocks.cu only (its kernels are defined here).
#pragma once

#include "models/cuda/common.cuh"

namespace cohort::models::cuda::train {

using bf16 = __nv_bfloat16;

__device__ inline float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ inline float4 load4(const bf16* p) {
  const uint2 v = *reinterpret_cast<const uint2*>(p);
  const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v.x));
  const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v.y));
  return make_float4(a.x, a.y, b.x, b.y);
}
__device__ inline void store4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
__device__ inline void store4(bf16* p, float4 v) {
  uint2 out;
  __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
  out.x = *reinterpret_cast<uint32_t*>(&a);
  out.y = *reinterpret_cast<uint32_t*>(&b);
  *reinterpret_cast<uint2*>(p) = out;
}
__device__ inline float4 add4(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}
__device__ inline float dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

// One block per row of `dim` (a multiple of 4): x = a (+ delta), written to
// x_out when given; xn = bf16(w * x * rstd); rstd saved. a and x_out may
// alias (the thread reads its four values before writing them).
template <int kThreadsPerRow>
__global__ void __launch_bounds__(kThreadsPerRow)
    add_rmsnorm_kernel(float* x_out, bf16* xn, float* rstd, const float* a, const bf16* delta,
                       const float* w, int dim, float eps) {
  const size_t base = static_cast<size_t>(blockIdx.x) * dim;
  float ss = 0.f;
  for (int j = threadIdx.x * 4; j < dim; j += kThreadsPerRow * 4) {
    float4 x = load4(a + base + j);
    if (delta) x = add4(x, load4(delta + base + j));
    if (x_out) store4(x_out + base + j, x);
    ss += dot4(x, x);
  }
  const float r = rsqrtf(block_reduce<false>(ss) / static_cast<float>(dim) + eps);
  for (int j = threadIdx.x * 4; j < dim; j += kThreadsPerRow * 4) {
    float4 x = x_out ? load4(x_out + base + j) : load4(a + base + j);
    if (delta && !x_out) x = add4(x, load4(delta + base + j));
    const float4 g = load4(w + j);
    store4(xn + base + j, make_float4(g.x * x.x * r, g.y * x.y * r, g.z * x.z * r, g.w * x.w * r));
  }
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
}

// out = a + bf16 delta, n a multiple of 4.
__global__ void add_bf16_kernel(float* out, const float* a, const bf16* delta, size_t n) {
  for (size_t i = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) * 4; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x * 4) {
    store4(out + i, add4(load4(a + i), load4(delta + i)));
  }
}

// fp32 -> bf16, n a multiple of 4.
__global__ void to_bf16_kernel(bf16* out, const float* x, size_t n) {
  for (size_t i = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) * 4; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x * 4) {
    store4(out + i, load4(x + i));
  }
}

// The input gradient of RMSNorm with a bf16 output gradient, one block per
// row: dx += rstd * (dout * w - x * rstd * mean(dout * w * x * rstd)); with
// dx_half, also the updated dx in bf16 (the operand of the next GEMM).
template <int kThreadsPerRow>
__global__ void __launch_bounds__(kThreadsPerRow)
    rmsnorm_backward_kernel(float* dx, bf16* dx_half, const bf16* dout, const float* x,
                            const float* w, const float* rstd, int dim) {
  const size_t base = static_cast<size_t>(blockIdx.x) * dim;
  const float r = rstd[blockIdx.x];
  float dot = 0.f;
  for (int j = threadIdx.x * 4; j < dim; j += kThreadsPerRow * 4) {
    const float4 d = load4(dout + base + j), g = load4(w + j), v = load4(x + base + j);
    dot += (d.x * g.x * v.x + d.y * g.y * v.y + d.z * g.z * v.z + d.w * g.w * v.w) * r;
  }
  const float mean = block_reduce<false>(dot) / static_cast<float>(dim);
  for (int j = threadIdx.x * 4; j < dim; j += kThreadsPerRow * 4) {
    const float4 d = load4(dout + base + j), g = load4(w + j), v = load4(x + base + j);
    float4 o = load4(dx + base + j);
    o.x += r * (d.x * g.x - v.x * r * mean);
    o.y += r * (d.y * g.y - v.y * r * mean);
    o.z += r * (d.z * g.z - v.z * r * mean);
    o.w += r * (d.w * g.w - v.w * r * mean);
    store4(dx + base + j, o);
    if (dx_half) store4(dx_half + base + j, o);
  }
}

// dw[j] += sum_i dout[i, j] * x[i, j] * rstd[i] (block 32 x 8: 32 columns,
// 8 row lanes; blockIdx.y a chunk of rows; chunks meet in an atomicAdd).
__global__ void rmsnorm_weight_grad_kernel(float* dw, const bf16* dout, const float* x,
                                           const float* rstd, int n, int dim, int rows_per_chunk) {
  __shared__ float part[8][33];
  const int j = blockIdx.x * 32 + threadIdx.x;
  const int begin = blockIdx.y * rows_per_chunk, end = min(n, begin + rows_per_chunk);
  float acc = 0.f;
  if (j < dim) {
    for (int i = begin + threadIdx.y; i < end; i += 8) {
      const size_t at = static_cast<size_t>(i) * dim + j;
      acc += __bfloat162float(dout[at]) * x[at] * rstd[i];
    }
  }
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && j < dim) {
    float s = 0.f;
    for (int k = 0; k < 8; ++k) s += part[k][threadIdx.x];
    atomicAdd(dw + j, s);
  }
}

// Where a row of q, k and v heads lives: [N, ld] with q heads first, then k,
// then v (the fused QKV GEMM's output), each head_dim wide.
struct QkvShape {
  int heads, kv_heads, head_dim, ld;
  float eps;
};

// A head's half (D/2 values) spread over a warp's lanes, kPer = D/64 each:
// lane l holds columns 2l, 2l + 1 when kPer is 2 (one 4-byte load of bf16,
// one 8-byte load of fp32), l + 32k otherwise.
template <int kPer>
__device__ inline int column(int lane, int k) {
  return kPer == 2 ? 2 * lane + k : lane + 32 * k;
}
template <int kPer>
__device__ inline void load_half(const bf16* p, int lane, float (&v)[kPer]) {
  if constexpr (kPer == 2) {
    const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p + 2 * lane));
    v[0] = f.x, v[1] = f.y;
  } else {
#pragma unroll
    for (int k = 0; k < kPer; ++k) v[k] = __bfloat162float(p[lane + 32 * k]);
  }
}
template <int kPer>
__device__ inline void load_half(const float* p, int lane, float (&v)[kPer]) {
  if constexpr (kPer == 2) {
    const float2 f = *reinterpret_cast<const float2*>(p + 2 * lane);
    v[0] = f.x, v[1] = f.y;
  } else {
#pragma unroll
    for (int k = 0; k < kPer; ++k) v[k] = p[lane + 32 * k];
  }
}
template <int kPer>
__device__ inline void store_half(bf16* p, int lane, const float (&v)[kPer]) {
  if constexpr (kPer == 2) {
    *reinterpret_cast<__nv_bfloat162*>(p + 2 * lane) = __floats2bfloat162_rn(v[0], v[1]);
  } else {
#pragma unroll
    for (int k = 0; k < kPer; ++k) p[lane + 32 * k] = __float2bfloat16_rn(v[k]);
  }
}

// One warp per (token, head) of q and k, grid-stride: rotated[row] = RoPE of
// the per-head RMSNorm of qkv[row] (norm weights null: RoPE alone); v heads
// are copied. rstd_q [N * heads], rstd_k [N * kv_heads]. Lane l holds the
// pairs (i, i + D/2) of its columns i (column()).
template <int D>
__global__ void qk_norm_rope_kernel(bf16* rotated, float* rstd_q, float* rstd_k, const bf16* qkv,
                                    const float* q_norm, const float* k_norm, const int32_t* pos,
                                    const float* cos, const float* sin, int n, QkvShape s) {
  constexpr int kHalf = D / 2, kPer = kHalf / 32;
  const int lane = threadIdx.x & 31;
  const int heads_all = s.heads + 2 * s.kv_heads;
  const size_t rows = static_cast<size_t>(n) * heads_all;
  for (size_t row = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) >> 5; row < rows;
       row += (static_cast<size_t>(gridDim.x) * blockDim.x) >> 5) {
    const int token = static_cast<int>(row / heads_all), head = static_cast<int>(row % heads_all);
    const size_t at = static_cast<size_t>(token) * s.ld + static_cast<size_t>(head) * D;
    float a[kPer], b[kPer];
    load_half<kPer>(qkv + at, lane, a);
    load_half<kPer>(qkv + at + kHalf, lane, b);
    if (head >= s.heads + s.kv_heads) {  // v: as it is
      store_half<kPer>(rotated + at, lane, a);
      store_half<kPer>(rotated + at + kHalf, lane, b);
      continue;
    }
    const bool is_q = head < s.heads;
    const float* norm = is_q ? q_norm : k_norm;
    if (norm) {
      float ss = 0.f;
#pragma unroll
      for (int k = 0; k < kPer; ++k) ss += a[k] * a[k] + b[k] * b[k];
      const float r = rsqrtf(warp_sum(ss) / static_cast<float>(D) + s.eps);
      float wa[kPer], wb[kPer];
      load_half<kPer>(norm, lane, wa);
      load_half<kPer>(norm + kHalf, lane, wb);
#pragma unroll
      for (int k = 0; k < kPer; ++k) a[k] = wa[k] * (a[k] * r), b[k] = wb[k] * (b[k] * r);
      if (lane == 0) {
        if (is_q) rstd_q[static_cast<size_t>(token) * s.heads + head] = r;
        else rstd_k[static_cast<size_t>(token) * s.kv_heads + head - s.heads] = r;
      }
    }
    const size_t table = static_cast<size_t>(pos[token]) * kHalf;
    float c[kPer], sn[kPer], ra[kPer], rb[kPer];
    load_half<kPer>(cos + table, lane, c);
    load_half<kPer>(sin + table, lane, sn);
#pragma unroll
    for (int k = 0; k < kPer; ++k) ra[k] = a[k] * c[k] - b[k] * sn[k], rb[k] = b[k] * c[k] + a[k] * sn[k];
    store_half<kPer>(rotated + at, lane, ra);
    store_half<kPer>(rotated + at + kHalf, lane, rb);
  }
}

// The backward of qk_norm_rope_kernel for the q and k heads, in place on
// dqkv (the gradient of `rotated`, on exit that of qkv): the inverse
// rotation, then RMSNorm's input gradient; norm weight gradients dq_norm,
// dk_norm [D] accumulate. Each lane keeps its columns' weight-gradient
// partials over the rows its warp visits; one block reduction and D
// atomics a block at the end.
template <int D>
__global__ void qk_norm_rope_backward_kernel(bf16* dqkv, float* dq_norm, float* dk_norm,
                                             const bf16* qkv, const float* rstd_q,
                                             const float* rstd_k, const float* q_norm,
                                             const float* k_norm, const int32_t* pos,
                                             const float* cos, const float* sin, int n, QkvShape s) {
  constexpr int kHalf = D / 2, kPer = kHalf / 32;
  __shared__ float partial[2][D];
  for (int i = threadIdx.x; i < 2 * D; i += blockDim.x) partial[i / D][i % D] = 0.f;
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const int heads_qk = s.heads + s.kv_heads;
  const size_t rows = static_cast<size_t>(n) * heads_qk;
  float pa[2][kPer] = {}, pb[2][kPer] = {};  // [q or k][column]
  for (size_t row = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) >> 5; row < rows;
       row += (static_cast<size_t>(gridDim.x) * blockDim.x) >> 5) {
    const int token = static_cast<int>(row / heads_qk), head = static_cast<int>(row % heads_qk);
    const size_t at = static_cast<size_t>(token) * s.ld + static_cast<size_t>(head) * D;
    const size_t table = static_cast<size_t>(pos[token]) * kHalf;
    float c[kPer], sn[kPer], da[kPer], db[kPer], ga[kPer], gb[kPer];
    load_half<kPer>(cos + table, lane, c);
    load_half<kPer>(sin + table, lane, sn);
    load_half<kPer>(dqkv + at, lane, da);
    load_half<kPer>(dqkv + at + kHalf, lane, db);
#pragma unroll
    for (int k = 0; k < kPer; ++k) {  // inverse rotation of the gradient
      ga[k] = da[k] * c[k] + db[k] * sn[k];
      gb[k] = db[k] * c[k] - da[k] * sn[k];
    }
    const bool is_q = head < s.heads;
    const float* norm = is_q ? q_norm : k_norm;
    if (norm) {
      const float r = is_q ? rstd_q[static_cast<size_t>(token) * s.heads + head]
                           : rstd_k[static_cast<size_t>(token) * s.kv_heads + head - s.heads];
      float xa[kPer], xb[kPer], wa[kPer], wb[kPer], dot = 0.f;
      load_half<kPer>(qkv + at, lane, xa);
      load_half<kPer>(qkv + at + kHalf, lane, xb);
      load_half<kPer>(norm, lane, wa);
      load_half<kPer>(norm + kHalf, lane, wb);
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        dot += (ga[k] * wa[k] * xa[k] + gb[k] * wb[k] * xb[k]) * r;
        pa[is_q ? 0 : 1][k] += ga[k] * xa[k] * r;
        pb[is_q ? 0 : 1][k] += gb[k] * xb[k] * r;
      }
      const float mean = warp_sum(dot) / static_cast<float>(D);
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        ga[k] = r * (ga[k] * wa[k] - xa[k] * r * mean);
        gb[k] = r * (gb[k] * wb[k] - xb[k] * r * mean);
      }
    }
    store_half<kPer>(dqkv + at, lane, ga);
    store_half<kPer>(dqkv + at + kHalf, lane, gb);
  }
  // The norm weights' gradients, where wanted (null under a frozen base).
  if (!(q_norm && dq_norm) && !(k_norm && dk_norm)) return;
#pragma unroll
  for (int w = 0; w < 2; ++w) {
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      atomicAdd(&partial[w][column<kPer>(lane, k)], pa[w][k]);
      atomicAdd(&partial[w][column<kPer>(lane, k) + kHalf], pb[w][k]);
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    if (q_norm && dq_norm) atomicAdd(dq_norm + i, partial[0][i]);
    if (k_norm && dk_norm) atomicAdd(dk_norm + i, partial[1][i]);
  }
}

__device__ inline float silu(float g) { return g / (1.0f + __expf(-g)); }

// h[i, j] = silu(gu[i, j]) * gu[i, I + j]; gu is [n, 2I] (the fused gate|up
// GEMM's output), I a multiple of 8: each thread takes 8 columns in 16-byte
// loads and stores.
__device__ inline uint4 pack8_bf16(const float* v) {
  uint4 out;
  uint32_t* o = reinterpret_cast<uint32_t*>(&out);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    __nv_bfloat162 pair = __floats2bfloat162_rn(v[2 * e], v[2 * e + 1]);
    o[e] = *reinterpret_cast<uint32_t*>(&pair);
  }
  return out;
}

__global__ void swiglu_forward_kernel(bf16* h, const bf16* gu, int n, int I) {
  const size_t pieces = static_cast<size_t>(n) * I / 8;
  for (size_t p = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; p < pieces;
       p += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t row = p / (I / 8), j = (p % (I / 8)) * 8;
    const bf16* r = gu + row * 2 * I;
    float g[8], u[8], out[8];
    unpack8_bf16(*reinterpret_cast<const uint4*>(r + j), g);
    unpack8_bf16(*reinterpret_cast<const uint4*>(r + I + j), u);
#pragma unroll
    for (int e = 0; e < 8; ++e) out[e] = silu(g[e]) * u[e];
    *reinterpret_cast<uint4*>(h + row * I + j) = pack8_bf16(out);
  }
}

// dgu = [dh * u * silu'(g), dh * silu(g)] per row.
__global__ void swiglu_backward_kernel(bf16* dgu, const bf16* dh, const bf16* gu, int n, int I) {
  const size_t pieces = static_cast<size_t>(n) * I / 8;
  for (size_t p = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; p < pieces;
       p += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t row = p / (I / 8), j = (p % (I / 8)) * 8;
    const bf16* r = gu + row * 2 * I;
    float g[8], u[8], d[8], dg[8], du[8];
    unpack8_bf16(*reinterpret_cast<const uint4*>(r + j), g);
    unpack8_bf16(*reinterpret_cast<const uint4*>(r + I + j), u);
    unpack8_bf16(*reinterpret_cast<const uint4*>(dh + row * I + j), d);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float sig = 1.0f / (1.0f + __expf(-g[e]));
      du[e] = d[e] * g[e] * sig;
      dg[e] = d[e] * u[e] * sig * (1.0f + g[e] * (1.0f - sig));
    }
    bf16* o = dgu + row * 2 * I;
    *reinterpret_cast<uint4*>(o + j) = pack8_bf16(dg);
    *reinterpret_cast<uint4*>(o + I + j) = pack8_bf16(du);
  }
}

// Cross-entropy over bf16 logits [rows, V], one block per row. Forward: the
// row's log-sum-exp (an online max and sum per thread, merged over the
// block) and loss = lse - logit[target]; kIgnoreIndex (-100) rows lose 0.
// Rows are read 8 values at a time when V is a multiple of 8 (every row then
// starts 16-byte aligned).
template <int kThreadsPerRow>
__global__ void __launch_bounds__(kThreadsPerRow)
    cross_entropy_forward_kernel(float* losses, float* lse, const bf16* logits,
                                 const int32_t* targets, int V) {
  const bf16* r = logits + static_cast<size_t>(blockIdx.x) * V;
  float m = -INFINITY, s = 0.f;
  auto take = [&](float x) {
    if (x > m) s *= __expf(m - x), m = x;
    s += __expf(x - m);
  };
  const int vec_end = V % 8 == 0 ? V : 0;
  for (int j = threadIdx.x * 8; j < vec_end; j += kThreadsPerRow * 8) {
    float x[8];
    unpack8_bf16(*reinterpret_cast<const uint4*>(r + j), x);
    float mx = x[0];
#pragma unroll
    for (int e = 1; e < 8; ++e) mx = fmaxf(mx, x[e]);
    if (mx > m) s *= __expf(m - mx), m = mx;
#pragma unroll
    for (int e = 0; e < 8; ++e) s += __expf(x[e] - m);
  }
  for (int j = vec_end + threadIdx.x; j < V; j += kThreadsPerRow) take(__bfloat162float(r[j]));
  const float row_max = block_reduce<true>(m);
  const float total = block_reduce<false>(m == -INFINITY ? 0.f : s * __expf(m - row_max));
  if (threadIdx.x == 0) {
    const float l = row_max + logf(total);
    const int t = targets[blockIdx.x];
    lse[blockIdx.x] = l;
    losses[blockIdx.x] = (t < 0 || t >= V) ? 0.f : l - __bfloat162float(r[t]);
  }
}

// In place: logits become grad_scale * (softmax - onehot(target)), zeros on
// ignored rows.
template <int kThreadsPerRow>
__global__ void __launch_bounds__(kThreadsPerRow)
    cross_entropy_backward_kernel(bf16* logits, const float* lse, const int32_t* targets, int V,
                                  float grad_scale) {
  bf16* r = logits + static_cast<size_t>(blockIdx.x) * V;
  const int t = targets[blockIdx.x];
  const bool ignored = t < 0 || t >= V;
  const float l = lse[blockIdx.x], scale = ignored ? 0.f : grad_scale;
  const int vec_end = V % 8 == 0 ? V : 0;
  for (int j = threadIdx.x * 8; j < vec_end; j += kThreadsPerRow * 8) {
    float x[8];
    unpack8_bf16(*reinterpret_cast<const uint4*>(r + j), x);
    uint4 out;
    uint32_t* o = reinterpret_cast<uint32_t*>(&out);
#pragma unroll
    for (int e = 0; e < 8; e += 2) {
      const float g0 = scale * (__expf(x[e] - l) - (j + e == t ? 1.f : 0.f));
      const float g1 = scale * (__expf(x[e + 1] - l) - (j + e + 1 == t ? 1.f : 0.f));
      __nv_bfloat162 pair = __floats2bfloat162_rn(g0, g1);
      o[e / 2] = *reinterpret_cast<uint32_t*>(&pair);
    }
    *reinterpret_cast<uint4*>(r + j) = out;
  }
  for (int j = vec_end + threadIdx.x; j < V; j += kThreadsPerRow) {
    const float x = __bfloat162float(r[j]);
    r[j] = __float2bfloat16_rn(scale * (__expf(x - l) - (j == t ? 1.f : 0.f)));
  }
}

}  // namespace cohort::models::cuda::train
