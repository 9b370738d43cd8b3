// CUDA dropout (CPU reference and mask: dropout.h): one thread per element,
// the mask drawn from the same counter-based hash as the CPU, so both
// backends drop the same elements.
#pragma once

#include "models/cuda/common.cuh"
#include "models/ops/dropout.h"

namespace cohort::models::cuda {

__global__ void dropout_forward_kernel(float* out, const float* x, int cols, size_t n,
                                       DropoutMask mask) {
  const float kept = 1.0f / (1.0f - mask.p);
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = dropout_keeps(mask, i / cols, i % cols) ? x[i] * kept : 0.0f;
  }
}

__global__ void dropout_backward_kernel(float* dx, const float* dout, int cols, size_t n,
                                        DropoutMask mask) {
  const float kept = 1.0f / (1.0f - mask.p);
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if (dropout_keeps(mask, i / cols, i % cols)) dx[i] += dout[i] * kept;
  }
}

}  // namespace cohort::models::cuda
