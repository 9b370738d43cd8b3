// CUDA small-batch projections (contract and CPU reference: gemv.h).
//
// A warp per output row (two for gemv_swiglu_bf16: the gate row and its up
// row), four warps a block, so even a 1,024-row projection spreads over 256
// blocks. Each lane streams 16-byte pieces of the weight row, stride 256
// elements, four loads issued before their multiply-adds; x comes through the
// read-only cache (n rows of at most a few KiB, shared by every warp of a
// multiprocessor). The lanes' partial sums meet by shuffles.
#pragma once

#include <cuda_bf16.h>

#include <type_traits>

#include "models/cuda/common.cuh"
#include "models/ops/gemv.h"

namespace cohort::models::cuda {

constexpr int kGemvWarps = 4;

// sum[r] += dot(w[0..8), x_r[0..8)) for the 8 bf16 of each 16-byte piece.
template <int N>
__device__ __forceinline__ void gemv_piece(float (&sum)[N], const uint4& wv, const Bf16Bits* x,
                                           int in, int k) {
  const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(&wv);
  float wf[8];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = __bfloat1622float2(w2[j]);
    wf[2 * j] = f.x, wf[2 * j + 1] = f.y;
  }
#pragma unroll
  for (int r = 0; r < N; ++r) {
    const uint4 xv = __ldg(reinterpret_cast<const uint4*>(x + static_cast<size_t>(r) * in + k));
    const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&xv);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = __bfloat1622float2(x2[j]);
      sum[r] = fmaf(wf[2 * j], f.x, sum[r]);
      sum[r] = fmaf(wf[2 * j + 1], f.y, sum[r]);
    }
  }
}

// The warp's dot products of weight row `row` with x's N rows, in every lane.
template <int N>
__device__ __forceinline__ void gemv_row(float (&sum)[N], const Bf16Bits* x, const Bf16Bits* row,
                                         int in) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < N; ++r) sum[r] = 0.0f;
  constexpr int kUnroll = 4, kStride = 32 * 8;
  int k = lane * 8;
  for (; k + (kUnroll - 1) * kStride < in; k += kUnroll * kStride) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = __ldg(reinterpret_cast<const uint4*>(row + k + u * kStride));
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) gemv_piece<N>(sum, wv[u], x, in, k + u * kStride);
  }
  for (; k < in; k += kStride) {
    gemv_piece<N>(sum, __ldg(reinterpret_cast<const uint4*>(row + k)), x, in, k);
  }
#pragma unroll
  for (int r = 0; r < N; ++r) sum[r] = warp_sum(sum[r]);
}

template <int N>
__global__ void __launch_bounds__(32 * kGemvWarps) gemv_bf16_kernel(float* y, const Bf16Bits* x,
                                                                    const Bf16Bits* w, int in,
                                                                    int out) {
  begin_dependent();
  const int o = blockIdx.x * kGemvWarps + threadIdx.x / 32;
  if (o >= out) return;
  float sum[N];
  gemv_row<N>(sum, x, w + static_cast<size_t>(o) * in, in);
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < N; ++r) {
    if (lane == r) y[static_cast<size_t>(r) * out + o] = sum[r];
  }
}

template <int N>
__global__ void __launch_bounds__(32 * kGemvWarps) gemv_swiglu_bf16_kernel(Bf16Bits* h,
                                                                           const Bf16Bits* x,
                                                                           const Bf16Bits* w,
                                                                           int in, int I) {
  begin_dependent();
  const int i = blockIdx.x * kGemvWarps + threadIdx.x / 32;
  if (i >= I) return;
  float g[N], u[N];
  gemv_row<N>(g, x, w + static_cast<size_t>(i) * in, in);
  gemv_row<N>(u, x, w + (static_cast<size_t>(I) + i) * in, in);
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < N; ++r) {
    if (lane == r) h[static_cast<size_t>(r) * I + i] = to_bf16_bits(g[r] / (1.0f + __expf(-g[r])) * u[r]);
  }
}

bool gemv_supported(int n, int in) { return n >= 1 && n <= kGemvMaxRows && in % 8 == 0; }

// Calls f(std::integral_constant<int, n>) for n in 1 .. kGemvMaxRows: the row
// count is a template argument so that the per-row sums live in registers.
template <typename F>
void with_rows(int n, F&& f) {
  switch (n) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 7: f(std::integral_constant<int, 7>{}); break;
    default: f(std::integral_constant<int, 8>{}); break;
  }
}

void gemv_bf16(float* y, const Bf16Bits* x, const Bf16Bits* w, int n, int in, int out,
               CUstream_st* stream) {
  const unsigned blocks = (out + kGemvWarps - 1) / kGemvWarps;
  with_rows(n, [&](auto rows) {
    launch_dependent(gemv_bf16_kernel<decltype(rows)::value>, blocks, 32 * kGemvWarps, 0, stream, y, x, w, in, out);
  });
}

void gemv_swiglu_bf16(Bf16Bits* h, const Bf16Bits* x, const Bf16Bits* w, int n, int in,
                      int intermediate, CUstream_st* stream) {
  const unsigned blocks = (intermediate + kGemvWarps - 1) / kGemvWarps;
  with_rows(n, [&](auto rows) {
    launch_dependent(gemv_swiglu_bf16_kernel<decltype(rows)::value>, blocks, 32 * kGemvWarps, 0, stream, h, x, w, in, intermediate);
  });
}

}  // namespace cohort::models::cuda
