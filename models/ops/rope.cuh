// CUDA RoPE (CPU reference and contract: rope.h): one thread per rotated
// pair (token, head, i < D/2), in place; sign -1 applies the inverse.
#pragma once

#include "models/cuda/common.cuh"

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

}  // namespace cohort::models::cuda
