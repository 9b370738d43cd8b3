// CUDA greedy pick (CPU reference and contract: argmax.h). row_argmax: one
// block of 256 threads per row, a strided scan (each thread keeps its first
// maximum) then a tree reduction preferring the lower index on ties, so the
// result does not depend on scheduling. merge_argmax: one thread per row.
#pragma once

#include <cfloat>

#include "models/cuda/common.cuh"
#include "models/ops/argmax.h"

namespace cohort::models::cuda {

constexpr int kArgmaxThreads = 256;

__global__ void row_argmax_kernel(const float* logits, int V, int vocab_begin, float* out) {
  __shared__ float best_v[kArgmaxThreads];
  __shared__ int best_i[kArgmaxThreads];
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

void row_argmax(float* out, const float* logits, int n, int vocab_rows, int vocab_begin,
                CUstream_st* stream) {
  row_argmax_kernel<<<n, kArgmaxThreads, 0, stream>>>(logits, vocab_rows, vocab_begin, out);
}

void merge_argmax(int32_t* tokens, const float* gathered, int tp, int n, CUstream_st* stream) {
  merge_argmax_kernel<<<(n + 127) / 128, 128, 0, stream>>>(gathered, tp, n, tokens);
}

}  // namespace cohort::models::cuda
