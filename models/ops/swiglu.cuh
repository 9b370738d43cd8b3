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

// The same, four columns a thread (I % 4 == 0): float4 loads of gate and
// up, one 8-byte store, one row/column split per four values. Prompt rows
// make this a stream of gigabytes (0.6B shape, 16 x 1,984 rows: 1 GB a
// layer), which the one-value form read at about half of HBM's bandwidth.
__global__ void swiglu_bf16_x4_kernel(const float* gate_up, Bf16Bits* h, int n, int I) {
  begin_dependent();
  const int quads = I / 4;
  const size_t total = static_cast<size_t>(n) * quads;
  COHORT_GRID_STRIDE(q, total) {
    const size_t r = q / quads, i = (q % quads) * 4;
    const float4 g = *reinterpret_cast<const float4*>(gate_up + r * 2 * I + i);
    const float4 u = *reinterpret_cast<const float4*>(gate_up + r * 2 * I + I + i);
    const float a = g.x / (1.0f + __expf(-g.x)) * u.x, b = g.y / (1.0f + __expf(-g.y)) * u.y;
    const float c = g.z / (1.0f + __expf(-g.z)) * u.z, d = g.w / (1.0f + __expf(-g.w)) * u.w;
    *reinterpret_cast<uint2*>(h + r * I + i) = make_uint2(pack_bf16x2(a, b), pack_bf16x2(c, d));
  }
}

void swiglu_bf16(const float* gate_up, Bf16Bits* h, int n, int intermediate, CUstream_st* stream) {
  if (intermediate % 4 == 0) {
    const size_t quads = static_cast<size_t>(n) * (intermediate / 4);
    launch_dependent(swiglu_bf16_x4_kernel, grid_for(quads), kThreads, 0, stream, gate_up, h, n, intermediate);
    return;
  }
  const size_t total = static_cast<size_t>(n) * intermediate;
  launch_dependent(swiglu_bf16_kernel, grid_for(total), kThreads, 0, stream, gate_up, h, n, intermediate);
}

}  // namespace cohort::models::cuda
