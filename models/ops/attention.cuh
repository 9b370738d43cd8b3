// CUDA attention (CPU reference and contract: attention.h).
//
// Training: GEMM + softmax with strided-batched cuBLAS calls, one batch
// element at a time through a [heads, T, T] scratch (probabilities are not
// kept: forward saves the log-sum-exp, backward recomputes them). For batch b
// and position g inside a query group, query heads h = kv * group + g (kv = 0
// .. kv_heads-1) have uniform strides in q, k, v and the scratch, so each
// (b, g) is one batched GEMM over the KV heads and GQA needs no copies.
// Backward accumulates dK/dV across a group's g calls in stream order.
// Inference: one block per (new token, head) scores the cached keys in shared
// memory (capacity floats), softmaxes and mixes the values.
#pragma once

#include "models/cuda/common.cuh"
#include "models/ops/linear.cuh"

namespace cohort::models::cuda {

// Row-wise causal softmax of [rows, T] score blocks (row r is query r % T),
// in place; lse[r] receives the row's log-sum-exp.
__global__ void causal_softmax_kernel(float* p, float* lse, int T) {
  const size_t row = blockIdx.x;
  const int i = static_cast<int>(row % T);
  float* r = p + row * T;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) mx = fmaxf(mx, r[j]);
  mx = block_reduce<true>(mx);
  float sum = 0;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) {
    const float e = __expf(r[j] - mx);
    r[j] = e;
    sum += e;
  }
  sum = block_reduce<false>(sum);
  const float inv = 1.0f / sum;
  for (int j = threadIdx.x; j < T; j += blockDim.x) r[j] = j <= i ? r[j] * inv : 0.0f;
  if (threadIdx.x == 0) lse[row] = mx + logf(sum);
}

// Scores -> probabilities again, from the saved log-sum-exp.
__global__ void probs_from_lse_kernel(float* p, const float* lse, int T) {
  const size_t row = blockIdx.x;
  const int i = static_cast<int>(row % T);
  float* r = p + row * T;
  const float l = lse[row];
  for (int j = threadIdx.x; j < T; j += blockDim.x) r[j] = j <= i ? __expf(r[j] - l) : 0.0f;
}

// dS = P * (dP - rowsum(P * dP)), in place over dP.
__global__ void softmax_backward_kernel(float* dp, const float* p, int T) {
  const size_t row = blockIdx.x;
  float* d = dp + row * T;
  const float* pr = p + row * T;
  float dot = 0;
  for (int j = threadIdx.x; j < T; j += blockDim.x) dot += pr[j] * d[j];
  dot = block_reduce<false>(dot);
  for (int j = threadIdx.x; j < T; j += blockDim.x) d[j] = pr[j] * (d[j] - dot);
}

struct AttentionShape {
  int B, T, heads, kv_heads, D;
  int group() const { return heads / kv_heads; }
  int ldq() const { return heads * D; }
  int ldk() const { return kv_heads * D; }
};

// scores[h] = scale * q_h k_h^T for every head of batch element b.
inline void attention_scores(const Blas& h, float* scores, const float* q, const float* k, int b,
                             const AttentionShape& s) {
  const int T = s.T, D = s.D, G = s.group(), ldq = s.ldq(), ldk = s.ldk();
  const long long TT = static_cast<long long>(T) * T;
  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  for (int g = 0; g < G; ++g) {
    gemm_strided(h, CUBLAS_OP_T, CUBLAS_OP_N, T, T, D, scale, k + static_cast<size_t>(b) * T * ldk,
                 ldk, D, q + static_cast<size_t>(b) * T * ldq + g * D, ldq,
                 static_cast<long long>(G) * D, 0.0f, scores + g * TT, T, G * TT, s.kv_heads);
  }
}

// scratch: heads * T * T floats.
inline void attention_forward(const Blas& h, cudaStream_t stream, float* y, float* lse,
                              float* scratch, const float* q, const float* k, const float* v,
                              const AttentionShape& s) {
  const int T = s.T, D = s.D, G = s.group(), ldq = s.ldq(), ldk = s.ldk();
  const long long TT = static_cast<long long>(T) * T;
  const unsigned rows = static_cast<unsigned>(s.heads * T);
  for (int b = 0; b < s.B; ++b) {
    attention_scores(h, scratch, q, k, b, s);
    causal_softmax_kernel<<<rows, kThreads, 0, stream>>>(scratch,
                                                         lse + static_cast<size_t>(b) * rows, T);
    for (int g = 0; g < G; ++g) {
      gemm_strided(h, CUBLAS_OP_N, CUBLAS_OP_N, D, T, T, 1.0f, v + static_cast<size_t>(b) * T * ldk,
                   ldk, D, scratch + g * TT, T, G * TT, 0.0f,
                   y + static_cast<size_t>(b) * T * ldq + g * D, ldq, static_cast<long long>(G) * D,
                   s.kv_heads);
    }
  }
}

// scratch: 2 * heads * T * T floats (probabilities, then their gradient).
inline void attention_backward(const Blas& h, cudaStream_t stream, float* dq, float* dk,
                               float* dv, float* scratch, const float* dy, const float* q,
                               const float* k, const float* v, const float* lse,
                               const AttentionShape& s) {
  const int T = s.T, D = s.D, G = s.group(), ldq = s.ldq(), ldk = s.ldk();
  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  const long long TT = static_cast<long long>(T) * T, qs = static_cast<long long>(G) * D;
  const unsigned rows = static_cast<unsigned>(s.heads * T);
  float* p = scratch;
  float* ds = scratch + static_cast<size_t>(s.heads) * TT;
  for (int b = 0; b < s.B; ++b) {
    const size_t qoff = static_cast<size_t>(b) * T * ldq, koff = static_cast<size_t>(b) * T * ldk;
    attention_scores(h, p, q, k, b, s);
    probs_from_lse_kernel<<<rows, kThreads, 0, stream>>>(p, lse + static_cast<size_t>(b) * rows, T);
    for (int g = 0; g < G; ++g) {  // dP = dY V^T, then dV += P^T dY
      gemm_strided(h, CUBLAS_OP_T, CUBLAS_OP_N, T, T, D, 1.0f, v + koff, ldk, D, dy + qoff + g * D,
                   ldq, qs, 0.0f, ds + g * TT, T, G * TT, s.kv_heads);
      gemm_strided(h, CUBLAS_OP_N, CUBLAS_OP_T, D, T, T, 1.0f, dy + qoff + g * D, ldq, qs,
                   p + g * TT, T, G * TT, 1.0f, dv + koff, ldk, D, s.kv_heads);
    }
    softmax_backward_kernel<<<rows, kThreads, 0, stream>>>(ds, p, T);
    for (int g = 0; g < G; ++g) {  // dQ += scale dS K, dK += scale dS^T Q
      gemm_strided(h, CUBLAS_OP_N, CUBLAS_OP_N, D, T, T, scale, k + koff, ldk, D, ds + g * TT, T,
                   G * TT, 1.0f, dq + qoff + g * D, ldq, qs, s.kv_heads);
      gemm_strided(h, CUBLAS_OP_N, CUBLAS_OP_T, D, T, T, scale, q + qoff + g * D, ldq, qs,
                   ds + g * TT, T, G * TT, 1.0f, dk + koff, ldk, D, s.kv_heads);
    }
  }
}

__global__ void kv_cache_write_kernel(float* cache, const float* src, int m, int first_pos,
                                      int capacity, int kv_heads, int D) {
  const size_t total = static_cast<size_t>(m) * kv_heads * D;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int d = static_cast<int>(i % D);
    const int hh = static_cast<int>((i / D) % kv_heads);
    const int t = static_cast<int>(i / (static_cast<size_t>(D) * kv_heads));
    cache[(static_cast<size_t>(hh) * capacity + first_pos + t) * D + d] = src[i];
  }
}

// Block (token t, head h); dynamic shared memory holds first_pos + m scores.
__global__ void attention_cached_kernel(float* y, const float* q, const float* kcache,
                                        const float* vcache, int first_pos, int capacity, int heads,
                                        int kv_heads, int D) {
  extern __shared__ float scores[];
  const int t = blockIdx.x, h = blockIdx.y, len = first_pos + t + 1;
  const int kvh = h / (heads / kv_heads);
  const float* qh = q + (static_cast<size_t>(t) * heads + h) * D;
  const float* kh = kcache + static_cast<size_t>(kvh) * capacity * D;
  const float* vh = vcache + static_cast<size_t>(kvh) * capacity * D;
  const float scale = rsqrtf(static_cast<float>(D));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int j = warp; j < len; j += warps) {  // one warp per key: coalesced over d
    float s = 0;
    for (int d = lane; d < D; d += 32) s += qh[d] * kh[static_cast<size_t>(j) * D + d];
    s = warp_sum(s);
    if (lane == 0) scores[j] = s * scale;
  }
  __syncthreads();
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < len; j += blockDim.x) mx = fmaxf(mx, scores[j]);
  mx = block_reduce<true>(mx);
  float sum = 0;
  for (int j = threadIdx.x; j < len; j += blockDim.x) {
    scores[j] = __expf(scores[j] - mx);
    sum += scores[j];
  }
  const float inv = 1.0f / block_reduce<false>(sum);
  float* yh = y + (static_cast<size_t>(t) * heads + h) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0;
    for (int j = 0; j < len; ++j) acc += scores[j] * vh[static_cast<size_t>(j) * D + d];
    yh[d] = acc * inv;
  }
}

}  // namespace cohort::models::cuda
