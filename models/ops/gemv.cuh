// CUDA small-batch projections (contract and CPU reference: gemv.h).
//
// A warp per output row (two for the SwiGLU forms: the gate row and its up
// row), four warps a block, so even a 1,024-row projection spreads over 256
// blocks. Each lane streams 16-byte pieces of the weight row, stride 256
// elements, four loads issued before their multiply-adds. The lanes' partial
// sums meet by shuffles.
//
// Weights never change within a step, so the first pieces of each warp's
// rows are loaded before the kernel waits for its predecessor (programmatic
// dependent launch, common.cuh): the weight stream of one projection starts
// while the kernel before it is still finishing. x comes through the
// read-only cache (n rows of a few KiB, shared by every warp of a
// multiprocessor), or, in the norm forms, from shared memory where each
// block has normalised the residual rows itself.
#pragma once

#include <cuda_bf16.h>

#include <type_traits>

#include "models/cuda/common.cuh"
#include "models/ops/gemv.h"

namespace cohort::models::cuda {

constexpr int kGemvWarps = 4;
constexpr int kGemvUnroll = 4;
constexpr int kGemvStride = 32 * 8;  // elements a warp covers per 16-byte load

// The input rows a projection reads: bf16 x in global memory, or the rows
// the block normalised into shared memory. Plain loads either way: x is the
// predecessor's output, and a read-only (__ldg) load counts as invariant to
// the compiler, which may then move it above the wait for that predecessor.
// (The weights, which no kernel writes, take __ldg.)
template <bool kShared>
__device__ __forceinline__ uint4 load_x(const Bf16Bits* x) {
  return *reinterpret_cast<const uint4*>(x);
}

// sum[r] += dot(w[0..8), x_r[0..8)) for the 8 bf16 of each 16-byte piece.
template <int N, bool kShared>
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
    const uint4 xv = load_x<kShared>(x + static_cast<size_t>(r) * in + k);
    const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&xv);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = __bfloat1622float2(x2[j]);
      sum[r] = fmaf(wf[2 * j], f.x, sum[r]);
      sum[r] = fmaf(wf[2 * j + 1], f.y, sum[r]);
    }
  }
}

// One weight row's stream: its first kGemvUnroll pieces are loaded by
// start() (before the kernel waits on its predecessor), the rest as
// finish() goes.
struct GemvRowStream {
  uint4 first[kGemvUnroll];
  const Bf16Bits* row = nullptr;
  bool live = false;

  __device__ __forceinline__ void start(const Bf16Bits* weight_row, int in, bool row_exists) {
    row = weight_row, live = row_exists;
    const int k = threadIdx.x % 32 * 8;
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) {
      if (live && k + u * kGemvStride < in) {
        first[u] = __ldg(reinterpret_cast<const uint4*>(row + k + u * kGemvStride));
      }
    }
  }

  // The warp's dot products of the row with x's N rows, in every lane.
  template <int N, bool kShared>
  __device__ __forceinline__ void finish(float (&sum)[N], const Bf16Bits* x, int in) const {
#pragma unroll
    for (int r = 0; r < N; ++r) sum[r] = 0.0f;
    const int k0 = threadIdx.x % 32 * 8;
#pragma unroll
    for (int u = 0; u < kGemvUnroll; ++u) {
      if (k0 + u * kGemvStride < in) gemv_piece<N, kShared>(sum, first[u], x, in, k0 + u * kGemvStride);
    }
    int k = k0 + kGemvUnroll * kGemvStride;
    for (; k + (kGemvUnroll - 1) * kGemvStride < in; k += kGemvUnroll * kGemvStride) {
      uint4 wv[kGemvUnroll];
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) {
        wv[u] = __ldg(reinterpret_cast<const uint4*>(row + k + u * kGemvStride));
      }
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) gemv_piece<N, kShared>(sum, wv[u], x, in, k + u * kGemvStride);
    }
    for (; k < in; k += kGemvStride) {
      gemv_piece<N, kShared>(sum, __ldg(reinterpret_cast<const uint4*>(row + k)), x, in, k);
    }
#pragma unroll
    for (int r = 0; r < N; ++r) sum[r] = warp_sum(sum[r]);
  }
};

// Where a projection's rows come from. Plain: x [N, in] bf16. Norm form:
// x = bf16(rmsnorm(residual) * norm_weight), each block normalising the N
// fp32 residual rows into shared memory exactly as add_rmsnorm_bf16 writes
// them (same formula, same rounding).
struct GemvSource {
  const Bf16Bits* x = nullptr;
  const float* residual = nullptr;
  const float* norm_weight = nullptr;
  float eps = 0.0f;
};

// The norm form's shared memory: the N normalised rows (bf16), then the
// norm weight (fp32, `in` of them).
inline size_t gemv_norm_shared_bytes(int n, int in) {
  return static_cast<size_t>(n) * in * sizeof(Bf16Bits) + static_cast<size_t>(in) * sizeof(float);
}

// Norm form, before the kernel waits on its predecessor: the norm weight
// (a model weight, which no kernel writes) goes to shared memory.
template <bool kNorm>
__device__ __forceinline__ void gemv_stage_norm_weight(const GemvSource& src, int N, int in) {
  if constexpr (kNorm) {
    extern __shared__ uint4 gemv_shared[];
    float* weight = reinterpret_cast<float*>(reinterpret_cast<Bf16Bits*>(gemv_shared) + static_cast<size_t>(N) * in);
    for (int j = threadIdx.x; j < in; j += blockDim.x) weight[j] = __ldg(src.norm_weight + j);
  }
}

// The rows the block's warps read: src.x, or (kNorm) shared memory filled
// here. Every thread of the block calls it (it has barriers). The N rows'
// sums of squares are taken in one pass and reduced together, so the
// prologue costs one read of the residual from L2 whatever N is; the second
// pass re-reads it from L1.
template <int N, bool kNorm>
__device__ __forceinline__ const Bf16Bits* gemv_rows(const GemvSource& src, int in) {
  if constexpr (!kNorm) {
    return src.x;
  } else {
    extern __shared__ uint4 gemv_shared[];
    __shared__ float partial[kGemvWarps][N];
    Bf16Bits* xs = reinterpret_cast<Bf16Bits*>(gemv_shared);
    const float* weight = reinterpret_cast<const float*>(xs + static_cast<size_t>(N) * in);
    float ss[N];
#pragma unroll
    for (int r = 0; r < N; ++r) ss[r] = 0.0f;
    for (int j = threadIdx.x; j < in; j += blockDim.x) {
#pragma unroll
      for (int r = 0; r < N; ++r) {
        const float v = src.residual[static_cast<size_t>(r) * in + j];
        ss[r] += v * v;
      }
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int r = 0; r < N; ++r) {
      ss[r] = warp_sum(ss[r]);
      if (lane == 0) partial[warp][r] = ss[r];
    }
    __syncthreads();  // also orders the staged norm weight before its use
    float rstd[N];
#pragma unroll
    for (int r = 0; r < N; ++r) {
      float total = 0.0f;
      for (int w = 0; w < kGemvWarps; ++w) total += partial[w][r];
      rstd[r] = rsqrtf(total / static_cast<float>(in) + src.eps);
    }
    for (int j = threadIdx.x; j < in; j += blockDim.x) {
      const float g = weight[j];
#pragma unroll
      for (int r = 0; r < N; ++r) {
        xs[static_cast<size_t>(r) * in + j] = to_bf16_bits(g * (src.residual[static_cast<size_t>(r) * in + j] * rstd[r]));
      }
    }
    __syncthreads();
    return xs;
  }
}

// y [N, out] (fp32) = rows · wᵀ, or y += that (kAccumulate: the residual
// stream takes the projection in place).
template <int N, bool kNorm, bool kAccumulate>
__global__ void __launch_bounds__(32 * kGemvWarps) gemv_bf16_kernel(float* y, GemvSource src,
                                                                    const Bf16Bits* w, int in,
                                                                    int out) {
  const int o = blockIdx.x * kGemvWarps + threadIdx.x / 32;
  GemvRowStream stream;
  stream.start(w + static_cast<size_t>(o) * in, in, o < out);
  gemv_stage_norm_weight<kNorm>(src, N, in);
  begin_dependent();
  const Bf16Bits* x = gemv_rows<N, kNorm>(src, in);
  if (o >= out) return;
  float sum[N];
  stream.finish<N, kNorm>(sum, x, in);
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < N; ++r) {
    if (lane == r) {
      float* at = y + static_cast<size_t>(r) * out + o;
      *at = kAccumulate ? *at + sum[r] : sum[r];
    }
  }
}

template <int N, bool kNorm>
__global__ void __launch_bounds__(32 * kGemvWarps) gemv_swiglu_bf16_kernel(Bf16Bits* h,
                                                                           GemvSource src,
                                                                           const Bf16Bits* w,
                                                                           int in, int I) {
  const int i = blockIdx.x * kGemvWarps + threadIdx.x / 32;
  GemvRowStream gate, up;
  gate.start(w + static_cast<size_t>(i) * in, in, i < I);
  up.start(w + (static_cast<size_t>(I) + i) * in, in, i < I);
  gemv_stage_norm_weight<kNorm>(src, N, in);
  begin_dependent();
  const Bf16Bits* x = gemv_rows<N, kNorm>(src, in);
  if (i >= I) return;
  float g[N], u[N];
  gate.finish<N, kNorm>(g, x, in);
  up.finish<N, kNorm>(u, x, in);
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < N; ++r) {
    if (lane == r) h[static_cast<size_t>(r) * I + i] = to_bf16_bits(g[r] / (1.0f + __expf(-g[r])) * u[r]);
  }
}

bool gemv_supported(int n, int in) { return n >= 1 && n <= kGemvMaxRows && in % 8 == 0; }

bool gemv_norm_supported(int n, int in) {
  return gemv_supported(n, in) && n <= kGemvNormMaxRows &&
         gemv_norm_shared_bytes(n, in) <= kGemvNormSharedBytes;
}

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
               CUstream_st* stream, GemvOutput output) {
  const unsigned blocks = (out + kGemvWarps - 1) / kGemvWarps;
  const GemvSource src{x};
  with_rows(n, [&](auto rows) {
    constexpr int N = decltype(rows)::value;
    if (output == GemvOutput::kAccumulate) {
      launch_dependent(gemv_bf16_kernel<N, false, true>, blocks, 32 * kGemvWarps, 0, stream, y, src, w, in, out);
    } else {
      launch_dependent(gemv_bf16_kernel<N, false, false>, blocks, 32 * kGemvWarps, 0, stream, y, src, w, in, out);
    }
  });
}

void gemv_norm_bf16(float* y, const float* residual, const float* norm_weight, float eps,
                    const Bf16Bits* w, int n, int in, int out, CUstream_st* stream) {
  const unsigned blocks = (out + kGemvWarps - 1) / kGemvWarps;
  const GemvSource src{nullptr, residual, norm_weight, eps};
  const size_t smem = gemv_norm_shared_bytes(n, in);
  with_rows(n, [&](auto rows) {
    constexpr int N = decltype(rows)::value;
    if constexpr (N <= kGemvNormMaxRows) {
      launch_dependent(gemv_bf16_kernel<N, true, false>, blocks, 32 * kGemvWarps, smem, stream, y, src, w, in, out);
    }
  });
}

void gemv_swiglu_bf16(Bf16Bits* h, const Bf16Bits* x, const Bf16Bits* w, int n, int in,
                      int intermediate, CUstream_st* stream) {
  const unsigned blocks = (intermediate + kGemvWarps - 1) / kGemvWarps;
  const GemvSource src{x};
  with_rows(n, [&](auto rows) {
    launch_dependent(gemv_swiglu_bf16_kernel<decltype(rows)::value, false>, blocks, 32 * kGemvWarps, 0, stream, h, src, w, in, intermediate);
  });
}

void gemv_norm_swiglu_bf16(Bf16Bits* h, const float* residual, const float* norm_weight,
                           float eps, const Bf16Bits* w, int n, int in, int intermediate,
                           CUstream_st* stream) {
  const unsigned blocks = (intermediate + kGemvWarps - 1) / kGemvWarps;
  const GemvSource src{nullptr, residual, norm_weight, eps};
  const size_t smem = gemv_norm_shared_bytes(n, in);
  with_rows(n, [&](auto rows) {
    constexpr int N = decltype(rows)::value;
    if constexpr (N <= kGemvNormMaxRows) {
      launch_dependent(gemv_swiglu_bf16_kernel<N, true>, blocks, 32 * kGemvWarps, smem, stream, h, src, w, in, intermediate);
    }
  });
}

}  // namespace cohort::models::cuda
