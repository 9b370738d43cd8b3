// Kernels of the bf16 decode engine (see infer_cuda_kernels.h for layouts).
// Each fuses what sits between two GEMMs, so a decoder layer is four cuBLAS
// calls, two all-reduces and five small kernels.
#include <cuda_bf16.h>

#include <cfloat>

#include "infer/cuda_graph_kernels.h"

namespace cohort::infer::cuda {
namespace {

__device__ inline float to_float(bf16 v) {
  return __bfloat162float(__ushort_as_bfloat16(v));
}
__device__ inline bf16 to_bf16_bits(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

__device__ inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim a multiple of 32); every thread gets it.
__device__ inline float block_sum(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < warps ? partial[lane] : 0.0f;
  v = warp_sum(v);
  __syncthreads();
  return v;
}

__global__ void embed_kernel(float* x, const bf16* table, const int32_t* tokens, int hidden,
                             int vocab_begin, int vocab_rows) {
  const int r = blockIdx.x;
  const int row = tokens[r] - vocab_begin;
  const bool mine = row >= 0 && row < vocab_rows;
  for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
    x[static_cast<size_t>(r) * hidden + j] =
        mine ? to_float(table[static_cast<size_t>(row) * hidden + j]) : 0.0f;
  }
}

__global__ void add_rmsnorm_kernel(float* x, const float* delta, const float* w, bf16* out,
                                   int hidden, float eps) {
  const size_t base = static_cast<size_t>(blockIdx.x) * hidden;
  float ss = 0;
  for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
    float v = x[base + j];
    if (delta) x[base + j] = v = v + delta[base + j];
    ss += v * v;
  }
  const float rstd = rsqrtf(block_sum(ss) / static_cast<float>(hidden) + eps);
  for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
    out[base + j] = to_bf16_bits(w[j] * (x[base + j] * rstd));
  }
}

// One block per (row, head); thread i < D/2 holds elements i and i + D/2.
__global__ void qkv_rope_cache_kernel(const float* qkv, const float* bias, const float* q_norm,
                                      const float* k_norm, const float* rope_cos,
                                      const float* rope_sin, RowIndex rows, QkvShape s,
                                      float* q_out, bf16* k_cache, bf16* v_cache) {
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
  if (norm) {  // uniform across the block: the barrier inside is safe
    const float rstd = rsqrtf(block_sum(a * a + b * b) / static_cast<float>(D) + s.eps);
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
  bf16* cache = is_k ? k_cache : v_cache;
  bf16* dst = cache + ((static_cast<size_t>(slot) * s.hkv + kv) * s.capacity + pos) * D;
  dst[i] = to_bf16_bits(a), dst[i + half] = to_bf16_bits(b);
}

constexpr int kAttnWarps = 8;
constexpr int kDimsPerLane = 16;

__device__ inline void load16(const bf16* p, float* out) {
  const uint4* v = reinterpret_cast<const uint4*>(p);
  const uint4 w[2] = {v[0], v[1]};
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(w);
  for (int k = 0; k < 8; ++k) {
    const float2 f = __bfloat1622float2(h[k]);
    out[2 * k] = f.x, out[2 * k + 1] = f.y;
  }
}

// Merges a partial softmax state (m, l, acc) with another one.
__device__ inline void merge_state(float& m, float& l, float* acc, float m2, float l2,
                                   const float* acc2) {
  const float M = fmaxf(m, m2);
  const float a = m == -FLT_MAX ? 0.0f : __expf(m - M);
  const float b = m2 == -FLT_MAX ? 0.0f : __expf(m2 - M);
  l = l * a + l2 * b;
  for (int k = 0; k < kDimsPerLane; ++k) acc[k] = acc[k] * a + acc2[k] * b;
  m = M;
}

// One block per (row, query head). A position is handled by `lanes` lanes
// (D / 16 of them, 16 dims each), so a warp covers 32 / lanes positions per
// step; every group keeps an online-softmax state, merged at the end within
// the warp (shuffles) and across warps (shared memory).
__global__ void attention_kernel(const float* q, const bf16* k_cache, const bf16* v_cache,
                                 RowIndex rows, QkvShape s, bf16* y) {
  const int r = blockIdx.x, h = blockIdx.y, D = s.head_dim;
  const int lanes = D / kDimsPerLane, per_warp = 32 / lanes;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = lane / lanes, sub = lane % lanes;
  const int kv = h / (s.hq / s.hkv), pos = rows.positions[r];
  const size_t head_base = (static_cast<size_t>(rows.slots[r]) * s.hkv + kv) * s.capacity * D;
  const float scale = rsqrtf(static_cast<float>(D));
  float qv[kDimsPerLane], acc[kDimsPerLane], kvv[kDimsPerLane];
  const float* qrow = q + (static_cast<size_t>(r) * s.hq + h) * D + sub * kDimsPerLane;
  for (int k = 0; k < kDimsPerLane; ++k) qv[k] = qrow[k] * scale, acc[k] = 0.0f;
  float m = -FLT_MAX, l = 0.0f;
  for (int base = warp * per_warp; base <= pos; base += kAttnWarps * per_warp) {
    const int t = base + group;
    const bool valid = t <= pos;
    float dot = 0.0f;
    if (valid) {
      load16(k_cache + head_base + static_cast<size_t>(t) * D + sub * kDimsPerLane, kvv);
      for (int k = 0; k < kDimsPerLane; ++k) dot += qv[k] * kvv[k];
    }
    for (int o = lanes / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    if (valid) {
      const float M = fmaxf(m, dot);
      const float corr = __expf(m - M), p = __expf(dot - M);
      load16(v_cache + head_base + static_cast<size_t>(t) * D + sub * kDimsPerLane, kvv);
      l = l * corr + p;
      for (int k = 0; k < kDimsPerLane; ++k) acc[k] = acc[k] * corr + p * kvv[k];
      m = M;
    }
  }
  for (int o = lanes; o < 32; o <<= 1) {  // groups holding the same dims
    float other[kDimsPerLane];
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), l2 = __shfl_xor_sync(0xffffffffu, l, o);
    for (int k = 0; k < kDimsPerLane; ++k) other[k] = __shfl_xor_sync(0xffffffffu, acc[k], o);
    merge_state(m, l, acc, m2, l2, other);
  }
  extern __shared__ float shared[];  // [warps][D] acc, then [warps] m, [warps] l
  float* sm_acc = shared;
  float* sm_m = shared + kAttnWarps * D;
  float* sm_l = sm_m + kAttnWarps;
  if (group == 0) {
    for (int k = 0; k < kDimsPerLane; ++k) sm_acc[warp * D + sub * kDimsPerLane + k] = acc[k];
    if (sub == 0) sm_m[warp] = m, sm_l[warp] = l;
  }
  __syncthreads();
  float M = -FLT_MAX;
  for (int w = 0; w < kAttnWarps; ++w) M = fmaxf(M, sm_m[w]);
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float L = 0.0f, Y = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) {
      const float f = sm_m[w] == -FLT_MAX ? 0.0f : __expf(sm_m[w] - M);
      L += sm_l[w] * f;
      Y += sm_acc[w * D + d] * f;
    }
    y[(static_cast<size_t>(r) * s.hq + h) * D + d] = to_bf16_bits(Y / L);
  }
}

__global__ void swiglu_kernel(const float* gate_up, bf16* h, int n, int I) {
  const size_t total = static_cast<size_t>(n) * I;
  for (size_t e = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = e / I, i = e % I;
    const float g = gate_up[r * 2 * I + i], u = gate_up[r * 2 * I + I + i];
    h[e] = to_bf16_bits(g / (1.0f + __expf(-g)) * u);
  }
}

__global__ void row_argmax_kernel(const float* logits, int V, int vocab_begin, float* out) {
  __shared__ float best_v[256];
  __shared__ int best_i[256];
  const float* row = logits + static_cast<size_t>(blockIdx.x) * V;
  float bv = -FLT_MAX;
  int bi = 0x7fffffff;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    if (row[j] > bv) bv = row[j], bi = j;  // strided ascending: first max kept
  }
  best_v[threadIdx.x] = bv, best_i[threadIdx.x] = bi;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) {
      const float ov = best_v[threadIdx.x + stride];
      const int oi = best_i[threadIdx.x + stride];
      if (ov > best_v[threadIdx.x] || (ov == best_v[threadIdx.x] && oi < best_i[threadIdx.x])) {
        best_v[threadIdx.x] = ov, best_i[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out[2 * blockIdx.x] = best_v[0];
    out[2 * blockIdx.x + 1] = __int_as_float(best_i[0] + vocab_begin);
  }
}

__global__ void merge_argmax_kernel(const float* gathered, int tp, int n, int32_t* tokens) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= n) return;
  float best = -FLT_MAX;
  int index = 0;
  for (int k = 0; k < tp; ++k) {  // ranks hold ascending vocab ranges
    const float* pair = gathered + (static_cast<size_t>(k) * n + r) * 2;
    if (k == 0 || pair[0] > best) best = pair[0], index = __float_as_int(pair[1]);
  }
  tokens[r] = index;
}

__global__ void gather_rows_kernel(const bf16* src, const int32_t* idx, bf16* dst, int hidden) {
  const bf16* row = src + static_cast<size_t>(idx[blockIdx.x]) * hidden;
  for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
    dst[static_cast<size_t>(blockIdx.x) * hidden + j] = row[j];
  }
}

__global__ void to_bf16_kernel(const float* src, bf16* dst, size_t n) {
  for (size_t e = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[e] = to_bf16_bits(src[e]);
  }
}

unsigned grid_for(size_t n, int threads) {
  const size_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 ? 65535 : blocks));
}

}  // namespace

void embed(float* x, const bf16* table, RowIndex rows, int n, int hidden, int vocab_begin,
           int vocab_rows, cudaStream_t stream) {
  embed_kernel<<<n, 256, 0, stream>>>(x, table, rows.tokens, hidden, vocab_begin, vocab_rows);
}

void add_rmsnorm(float* x, const float* delta, const float* w, bf16* out, int n, int hidden,
                 float eps, cudaStream_t stream) {
  add_rmsnorm_kernel<<<n, 256, 0, stream>>>(x, delta, w, out, hidden, eps);
}

void qkv_rope_cache(const float* qkv, const float* qkv_bias, const float* q_norm,
                    const float* k_norm, const float* rope_cos, const float* rope_sin,
                    RowIndex rows, int n, const QkvShape& shape, float* q_out, bf16* k_cache,
                    bf16* v_cache, cudaStream_t stream) {
  const dim3 grid(n, shape.hq + 2 * shape.hkv);
  const int threads = ((shape.head_dim / 2 + 31) / 32) * 32;
  qkv_rope_cache_kernel<<<grid, threads, 0, stream>>>(qkv, qkv_bias, q_norm, k_norm, rope_cos,
                                                      rope_sin, rows, shape, q_out, k_cache,
                                                      v_cache);
}

void cached_attention(const float* q, const bf16* k_cache, const bf16* v_cache, RowIndex rows,
                      int n, const QkvShape& shape, bf16* y, cudaStream_t stream) {
  const dim3 grid(n, shape.hq);
  const size_t smem = sizeof(float) * kAttnWarps * (shape.head_dim + 2);
  attention_kernel<<<grid, kAttnWarps * 32, smem, stream>>>(q, k_cache, v_cache, rows, shape, y);
}

void swiglu(const float* gate_up, bf16* h, int n, int intermediate, cudaStream_t stream) {
  const size_t total = static_cast<size_t>(n) * intermediate;
  swiglu_kernel<<<grid_for(total, 256), 256, 0, stream>>>(gate_up, h, n, intermediate);
}

void row_argmax(const float* logits, int n, int vocab_rows, int vocab_begin, float* out,
                cudaStream_t stream) {
  row_argmax_kernel<<<n, 256, 0, stream>>>(logits, vocab_rows, vocab_begin, out);
}

void merge_argmax(const float* gathered, int tp, int n, int32_t* tokens, cudaStream_t stream) {
  merge_argmax_kernel<<<(n + 127) / 128, 128, 0, stream>>>(gathered, tp, n, tokens);
}

void gather_rows(const bf16* src, const int32_t* idx, bf16* dst, int k, int hidden,
                 cudaStream_t stream) {
  gather_rows_kernel<<<k, 256, 0, stream>>>(src, idx, dst, hidden);
}

void to_bf16(const float* src, bf16* dst, size_t n, cudaStream_t stream) {
  to_bf16_kernel<<<grid_for(n, 256), 256, 0, stream>>>(src, dst, n);
}

}  // namespace cohort::infer::cuda
