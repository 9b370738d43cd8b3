// CUDA SwiGLU, residual add and accumulate (CPU reference: swiglu.h):
// grid-stride elementwise kernels.
#pragma once

#include "models/cuda/common.cuh"
#include "models/ops/swiglu.h"

namespace cohort::models::cuda {

#define COHORT_GRID_STRIDE(i, n)                                                       \
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<size_t>(gridDim.x) * blockDim.x)

__global__ void swiglu_forward_kernel(float* h, const float* g, const float* u, size_t n) {
  COHORT_GRID_STRIDE(i, n) {
    const float sig = 1.0f / (1.0f + __expf(-g[i]));
    h[i] = g[i] * sig * u[i];
  }
}

__global__ void swiglu_backward_kernel(float* dg, float* du, const float* dh, const float* g,
                                       const float* u, size_t n) {
  COHORT_GRID_STRIDE(i, n) {
    const float sig = 1.0f / (1.0f + __expf(-g[i]));
    dg[i] += dh[i] * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
    du[i] += dh[i] * g[i] * sig;
  }
}

__global__ void add_kernel(float* out, const float* a, const float* b, size_t n) {
  COHORT_GRID_STRIDE(i, n) {
    out[i] = a[i] + b[i];
  }
}

__global__ void accumulate_kernel(float* dst, const float* src, size_t n) {
  COHORT_GRID_STRIDE(i, n) {
    dst[i] += src[i];
  }
}

__global__ void scale_kernel(float* x, size_t n, float factor) {
  COHORT_GRID_STRIDE(i, n) {
    x[i] *= factor;
  }
}

// The decode engine's fused form (swiglu.h): gate_up [n, 2I] -> h [n, I] bf16.
__global__ void swiglu_bf16_kernel(const float* gate_up, Bf16Bits* h, int n, int I) {
  begin_dependent();
  const size_t total = static_cast<size_t>(n) * I;
  COHORT_GRID_STRIDE(e, total) {
    const size_t r = e / I, i = e % I;
    const float g = gate_up[r * 2 * I + i], u = gate_up[r * 2 * I + I + i];
    h[e] = to_bf16_bits(g / (1.0f + __expf(-g)) * u);
  }
}

void swiglu_bf16(const float* gate_up, Bf16Bits* h, int n, int intermediate, CUstream_st* stream) {
  const size_t total = static_cast<size_t>(n) * intermediate;
  launch_dependent(swiglu_bf16_kernel, grid_for(total), kThreads, 0, stream, gate_up, h, n, intermediate);
}

}  // namespace cohort::models::cuda
