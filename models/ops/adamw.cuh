// CUDA AdamW and gradient-norm reduction (CPU reference and contract:
// adamw.h). fp32 master weights and moments, one thread per element.
#pragma once

#include "models/cuda/common.cuh"
#include "models/ops/adamw.h"

namespace cohort::models::cuda {

// `working` (may be null): the 16-bit working copy of p, rewritten in the
// same pass.
template <typename Half>
__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, size_t n, float lr,
                             float beta1, float beta2, float eps, float decay_factor, float bc1,
                             float bc2, Half* working) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float gi = g[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float pi = p[i] * decay_factor - lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
    p[i] = pi;
    if (working) working[i] = static_cast<Half>(pi);
  }
}

// Per-block partial sums of squares (in double for the global norm).
__global__ void sum_squares_kernel(double* partial, const float* x, size_t n) {
  double acc = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    acc += static_cast<double>(x[i]) * x[i];
  }
  // Reduce in float within the block would lose precision on huge buffers;
  // a double shared-memory tree keeps it exact enough.
  __shared__ double shared[kThreads];
  shared[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = shared[0];
}

}  // namespace cohort::models::cuda
