// CUDA small-batch projections (contract and CPU reference: gemv.h).
//
// A warp per output row (two for the SwiGLU forms: the gate row and its up
// row), four warps a block, so even a 1,024-row projection spreads over 256
// blocks. Each lane streams 16-byte pieces of the weight row, stride 256
// elements, four or eight loads a row issued before their multiply-adds.
// The lanes' partial sums meet by shuffles.
//
// Weights never change within a step, so the first pieces of each warp's
// rows are loaded before the kernel waits for its predecessor (programmatic
// dependent launch, common.cuh). x is the predecessor's output: plain
// loads, n rows of a few KiB shared by every warp of a multiprocessor.
//
// The norm forms fold the RMSNorm into the dot products: rmsnorm(x)·w =
// rstd · Σ_j x_j g_j w_j, and since a warp streams whole rows of w it meets
// every x_j of its input rows, so it sums x_j² on the way and scales at the
// end. No block-wide normalisation pass, no barrier, no shared memory:
// the kernel is the plain one with the residual (fp32) for x.
#pragma once

#include <cuda_bf16.h>

#include <type_traits>

#include "models/cuda/common.cuh"
#include "models/ops/gemv.h"

namespace cohort::models::cuda {

constexpr int kGemvWarps = 4;
// Pieces of a row a lane has in flight: 4 (2 KiB a warp), or in the
// one-row projections of one input row 8 for rows of 2,048 elements and
// more (a small model's output projections have 256 blocks, too few warps
// to cover memory latency with 4: 785 against 822 us a batch-1 step, in
// two calls on different machines, bench/RESULTS.md). The SwiGLU forms
// stream two rows a warp, 4 each.
constexpr int kGemvUnroll = 4;
constexpr int kGemvDeepUnroll = 8;
constexpr int kGemvStride = 32 * 8;  // elements a warp covers per 16-byte load

// Where a projection's input rows come from. Plain: x [N, in] bf16. Norm
// form: the fp32 residual [N, in] and the norm weight [in]; the result is
// that of x = rmsnorm(residual) * norm_weight in fp32 (not rounded to bf16
// as add_rmsnorm_bf16 writes it). Plain loads for x and the residual: they
// are the predecessor's output, and a read-only (__ldg) load counts as
// invariant to the compiler, which may then move it above the wait for
// that predecessor. (The weights, which no kernel writes, take __ldg.)
struct GemvSource {
  const Bf16Bits* x = nullptr;
  const float* residual = nullptr;
  const float* norm_weight = nullptr;
  float eps = 0.0f;
  // Norm form only, may be null: the normalised rows, bf16(w * (x * rstd))
  // as add_rmsnorm_bf16 writes them, for the kernels after this one (each
  // warp writes a slice once it has its rows' scales).
  Bf16Bits* normalized_out = nullptr;
};

// The running sums of a warp's M weight rows: dot products against the N
// input rows, and in the norm form the input rows' sums of squares.
template <int M, int N, bool kNorm>
struct GemvSums {
  float dot[M][N];
  float squares[kNorm ? N : 1];
};

// One 16-byte piece of each of the M weight rows at element k, against the
// N input rows, each input piece loaded once for all M.
template <int M, int N, bool kNorm>
__device__ __forceinline__ void gemv_piece(GemvSums<M, N, kNorm>& s, const uint4 (&wv)[M],
                                           const GemvSource& src, int in, int k) {
  float wf[M][8];
#pragma unroll
  for (int m = 0; m < M; ++m) unpack8_bf16(wv[m], wf[m]);
  float g[8];
  if constexpr (kNorm) {
    const float4* g4 = reinterpret_cast<const float4*>(src.norm_weight + k);
    const float4 ga = __ldg(g4), gb = __ldg(g4 + 1);
    g[0] = ga.x, g[1] = ga.y, g[2] = ga.z, g[3] = ga.w, g[4] = gb.x, g[5] = gb.y, g[6] = gb.z, g[7] = gb.w;
  }
#pragma unroll
  for (int r = 0; r < N; ++r) {
    float x[8];
    if constexpr (kNorm) {
      const float4* x4 = reinterpret_cast<const float4*>(src.residual + static_cast<size_t>(r) * in + k);
      const float4 xa = x4[0], xb = x4[1];
      x[0] = xa.x, x[1] = xa.y, x[2] = xa.z, x[3] = xa.w, x[4] = xb.x, x[5] = xb.y, x[6] = xb.z, x[7] = xb.w;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        s.squares[r] = fmaf(x[j], x[j], s.squares[r]);
        x[j] *= g[j];
      }
    } else {
      unpack8_bf16(*reinterpret_cast<const uint4*>(src.x + static_cast<size_t>(r) * in + k), x);
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
#pragma unroll
      for (int j = 0; j < 8; ++j) s.dot[m][r] = fmaf(wf[m][j], x[j], s.dot[m][r]);
    }
  }
}

// A warp's M weight rows (one, or a gate row and its up row): the first
// kUnroll pieces of each are loaded by start() (before the kernel waits on
// its predecessor), the rest as finish() goes.
template <int M, int kUnroll = kGemvUnroll>
struct GemvRows {
  uint4 first[kUnroll][M];
  const Bf16Bits* rows[M];
  bool live = false;

  __device__ __forceinline__ void start(const Bf16Bits* const (&weight_rows)[M], int in,
                                        bool rows_exist) {
    live = rows_exist;
    const int k = threadIdx.x % 32 * 8;
#pragma unroll
    for (int m = 0; m < M; ++m) rows[m] = weight_rows[m];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int m = 0; m < M; ++m) {
        if (live && k + u * kGemvStride < in) {
          first[u][m] = __ldg(reinterpret_cast<const uint4*>(rows[m] + k + u * kGemvStride));
        }
      }
    }
  }

  // The warp's dot products of its rows with the N input rows, in every
  // lane; the norm form scales each by its input row's 1 / rms.
  template <int N, bool kNorm>
  __device__ __forceinline__ void finish(float (&out)[M][N], const GemvSource& src, int in,
                                         float (*scales)[N] = nullptr) const {
    GemvSums<M, N, kNorm> s;
#pragma unroll
    for (int r = 0; r < N; ++r) {
#pragma unroll
      for (int m = 0; m < M; ++m) s.dot[m][r] = 0.0f;
      if constexpr (kNorm) s.squares[r] = 0.0f;
    }
    const int k0 = threadIdx.x % 32 * 8;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (k0 + u * kGemvStride < in) gemv_piece<M, N, kNorm>(s, first[u], src, in, k0 + u * kGemvStride);
    }
    int k = k0 + kUnroll * kGemvStride;
    for (; k + (kUnroll - 1) * kGemvStride < in; k += kUnroll * kGemvStride) {
      uint4 wv[kUnroll][M];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int m = 0; m < M; ++m) wv[u][m] = __ldg(reinterpret_cast<const uint4*>(rows[m] + k + u * kGemvStride));
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) gemv_piece<M, N, kNorm>(s, wv[u], src, in, k + u * kGemvStride);
    }
    for (; k < in; k += kGemvStride) {
      uint4 wv[M];
#pragma unroll
      for (int m = 0; m < M; ++m) wv[m] = __ldg(reinterpret_cast<const uint4*>(rows[m] + k));
      gemv_piece<M, N, kNorm>(s, wv, src, in, k);
    }
#pragma unroll
    for (int r = 0; r < N; ++r) {
      float scale = 1.0f;
      if constexpr (kNorm) scale = rsqrtf(warp_sum(s.squares[r]) / static_cast<float>(in) + src.eps);
      if (scales) (*scales)[r] = scale;
#pragma unroll
      for (int m = 0; m < M; ++m) out[m][r] = warp_sum(s.dot[m][r]) * scale;
    }
  }
};

// y [N, out] (fp32) = rows · wᵀ, or y += that (kAccumulate: the residual
// stream takes the projection in place).
template <int N, bool kNorm, bool kAccumulate, int kUnroll>
__global__ void __launch_bounds__(32 * kGemvWarps) gemv_bf16_kernel(float* y, GemvSource src,
                                                                    const Bf16Bits* w, int in,
                                                                    int out) {
  const int o = blockIdx.x * kGemvWarps + threadIdx.x / 32;
  GemvRows<1, kUnroll> rows;
  rows.start({w + static_cast<size_t>(o) * in}, in, o < out);
  begin_dependent();
  if (o >= out) return;
  float sum[1][N], scales[N];
  rows.finish<N, kNorm>(sum, src, in, &scales);
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < N; ++r) {
    if (lane == r) {
      float* at = y + static_cast<size_t>(r) * out + o;
      *at = kAccumulate ? *at + sum[0][r] : sum[0][r];
    }
  }
  if constexpr (kNorm) {
    if (src.normalized_out) {
      // Warp o writes elements [o * slice, (o + 1) * slice) of each row:
      // out * slice covers `in`.
      const int slice = (in + out - 1) / out;
      const int end = min(in, (o + 1) * slice);
#pragma unroll
      for (int r = 0; r < N; ++r) {
        for (int j = o * slice + lane; j < end; j += 32) {
          const size_t at = static_cast<size_t>(r) * in + j;
          src.normalized_out[at] = to_bf16_bits(src.norm_weight[j] * (src.residual[at] * scales[r]));
        }
      }
    }
  }
}

// At least kGemvSwigluMinBlocks blocks a multiprocessor (registers held to
// 65,536 / (128 * 6) = 85 a thread), so that a small model's gate/up grid
// (768 blocks for 3,072 rows) is one wave on 132 multiprocessors.
constexpr int kGemvSwigluMinBlocks = 6;

template <int N, bool kNorm>
__global__ void __launch_bounds__(32 * kGemvWarps, kGemvSwigluMinBlocks) gemv_swiglu_bf16_kernel(
    Bf16Bits* h, GemvSource src, const Bf16Bits* w, int in, int I) {
  const int i = blockIdx.x * kGemvWarps + threadIdx.x / 32;
  GemvRows<2> rows;
  rows.start({w + static_cast<size_t>(i) * in, w + (static_cast<size_t>(I) + i) * in}, in, i < I);
  begin_dependent();
  if (i >= I) return;
  float gu[2][N];
  rows.finish<N, kNorm>(gu, src, in);
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < N; ++r) {
    if (lane == r) {
      const float g = gu[0][r], u = gu[1][r];
      h[static_cast<size_t>(r) * I + i] = to_bf16_bits(g / (1.0f + __expf(-g)) * u);
    }
  }
}

bool gemv_supported(int n, int in) { return n >= 1 && n <= kGemvMaxRows && in % 8 == 0; }

bool gemv_norm_supported(int n, int in) { return gemv_supported(n, in) && n <= kGemvNormMaxRows; }

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

// Calls f(std::integral_constant<int, unroll>{}) with the pieces in flight
// for N input rows of `in` elements.
template <int N, typename F>
void with_unroll(int in, F&& f) {
  if constexpr (N == 1) {
    if (in >= kGemvDeepUnroll * kGemvStride) return f(std::integral_constant<int, kGemvDeepUnroll>{});
  }
  f(std::integral_constant<int, kGemvUnroll>{});
}

inline unsigned gemv_blocks(int rows) { return static_cast<unsigned>((rows + kGemvWarps - 1) / kGemvWarps); }

void gemv_bf16(float* y, const Bf16Bits* x, const Bf16Bits* w, int n, int in, int out,
               CUstream_st* stream, GemvOutput output) {
  const GemvSource src{x};
  with_rows(n, [&](auto rows) {
    constexpr int N = decltype(rows)::value;
    with_unroll<N>(in, [&](auto unroll) {
      constexpr int U = decltype(unroll)::value;
      if (output == GemvOutput::kAccumulate) {
        launch_dependent(gemv_bf16_kernel<N, false, true, U>, gemv_blocks(out), 32 * kGemvWarps, 0, stream, y, src, w, in, out);
      } else {
        launch_dependent(gemv_bf16_kernel<N, false, false, U>, gemv_blocks(out), 32 * kGemvWarps, 0, stream, y, src, w, in, out);
      }
    });
  });
}

void gemv_norm_bf16(float* y, const float* residual, const float* norm_weight, float eps,
                    const Bf16Bits* w, int n, int in, int out, CUstream_st* stream, Bf16Bits* normalized) {
  const GemvSource src{nullptr, residual, norm_weight, eps, normalized};
  with_rows(n, [&](auto rows) {
    constexpr int N = decltype(rows)::value;
    if constexpr (N <= kGemvNormMaxRows) {
      with_unroll<N>(in, [&](auto unroll) {
        launch_dependent(gemv_bf16_kernel<N, true, false, decltype(unroll)::value>, gemv_blocks(out), 32 * kGemvWarps, 0, stream, y, src, w, in, out);
      });
    }
  });
}

void gemv_swiglu_bf16(Bf16Bits* h, const Bf16Bits* x, const Bf16Bits* w, int n, int in,
                      int intermediate, CUstream_st* stream) {
  const GemvSource src{x};
  with_rows(n, [&](auto rows) {
    constexpr int N = decltype(rows)::value;
    launch_dependent(gemv_swiglu_bf16_kernel<N, false>, gemv_blocks(intermediate), 32 * kGemvWarps, 0, stream, h, src, w, in, intermediate);
  });
}

void gemv_norm_swiglu_bf16(Bf16Bits* h, const float* residual, const float* norm_weight,
                           float eps, const Bf16Bits* w, int n, int in, int intermediate,
                           CUstream_st* stream) {
  const GemvSource src{nullptr, residual, norm_weight, eps};
  with_rows(n, [&](auto rows) {
    constexpr int N = decltype(rows)::value;
    if constexpr (N <= kGemvNormMaxRows) {
      launch_dependent(gemv_swiglu_bf16_kernel<N, true>, gemv_blocks(intermediate), 32 * kGemvWarps, 0, stream, h, src, w, in, intermediate);
    }
  });
}

}  // namespace cohort::models::cuda
