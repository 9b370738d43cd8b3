// CUDA fused softmax cross-entropy (CPU reference and contract:
// cross_entropy.h), in three row-parallel phases so that vocab-parallel
// reductions can run between them: row max, then sum of exponentials and the
// target logit, then loss and (optionally) the in-place gradient.
#pragma once

#include "models/cuda/common.cuh"
#include "models/ops/cross_entropy.h"

namespace cohort::models::cuda {

__global__ void ce_max_kernel(float* row_max, const float* logits, int V) {
  const size_t row = blockIdx.x;
  const float* r = logits + row * V;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, r[j]);
  mx = block_reduce<true>(mx);
  if (threadIdx.x == 0) row_max[row] = mx;
}

__global__ void ce_sum_kernel(float* sum_exp, float* target_logit, const float* row_max,
                              const float* logits, const int32_t* targets, int V, int vocab_begin) {
  const size_t row = blockIdx.x;
  const float* r = logits + row * V;
  float s = 0;
  for (int j = threadIdx.x; j < V; j += blockDim.x) s += __expf(r[j] - row_max[row]);
  s = block_reduce<false>(s);
  if (threadIdx.x == 0) {
    sum_exp[row] = s;
    const int t = targets[row] - vocab_begin;
    target_logit[row] = (targets[row] != kIgnoreIndex && t >= 0 && t < V) ? r[t] : 0.0f;
  }
}

__global__ void ce_finish_kernel(float* losses, float* logits, const float* row_max,
                                 const float* sum_exp, const float* target_logit,
                                 const int32_t* targets, int V, int vocab_begin, float grad_scale) {
  const size_t row = blockIdx.x;
  const bool ignored = targets[row] == kIgnoreIndex;
  if (threadIdx.x == 0) {
    losses[row] = ignored ? 0.0f : logf(sum_exp[row]) + row_max[row] - target_logit[row];
  }
  if (grad_scale == 0.0f) return;
  float* r = logits + row * V;
  const float inv = 1.0f / sum_exp[row];
  const int t = targets[row] - vocab_begin;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    const float p = __expf(r[j] - row_max[row]) * inv;
    r[j] = ignored ? 0.0f : grad_scale * (p - (j == t ? 1.0f : 0.0f));
  }
}

}  // namespace cohort::models::cuda
