// CUDA RMSNorm (CPU reference and contract: rmsnorm.h). One block per row
// for forward and the input gradient (in-place forward is safe: each thread
// reads its elements before writing them); the weight gradient is a separate
// column reduction over rows, deterministic and free of atomics.
#pragma once

#include "models/cuda/common.cuh"
#include "models/ops/fp8_rows.cuh"
#include "models/ops/rmsnorm.h"

namespace cohort::models::cuda {

__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* x, const float* w,
                                       int dim, float eps) {
  const size_t row = blockIdx.x;
  const float* xi = x + row * dim;
  float ss = 0;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) ss += xi[j] * xi[j];
  ss = block_reduce<false>(ss);
  const float r = rsqrtf(ss / dim + eps);
  float* oi = out + row * dim;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) oi[j] = w[j] * (xi[j] * r);
  if (rstd && threadIdx.x == 0) rstd[row] = r;
}

__global__ void rmsnorm_backward_input_kernel(float* dx, const float* dout, const float* x,
                                              const float* w, const float* rstd, int dim) {
  const size_t row = blockIdx.x;
  const float* xi = x + row * dim;
  const float* di = dout + row * dim;
  const float r = rstd[row];
  float dot = 0;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) dot += di[j] * w[j] * xi[j] * r;
  const float mean = block_reduce<false>(dot) / dim;
  float* dxi = dx + row * dim;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) {
    dxi[j] += r * (di[j] * w[j] - xi[j] * r * mean);
  }
}

// dw[j] += sum_i dout[i, j] * x[i, j] * rstd[i]. Block (32 x 8): 32 columns,
// 8 row lanes reduced through shared memory; blockIdx.y takes one chunk of
// rows, so many rows (the per-head QK norm has tokens * heads of them) still
// spread over the GPU. Chunks meet in an fp32 atomicAdd.
__global__ void rmsnorm_backward_weight_kernel(float* dw, const float* dout, const float* x,
                                               const float* rstd, int n, int dim,
                                               int rows_per_chunk) {
  __shared__ float part[8][33];
  const int j = blockIdx.x * 32 + threadIdx.x;
  const int begin = blockIdx.y * rows_per_chunk;
  const int end = min(n, begin + rows_per_chunk);
  float acc = 0;
  if (j < dim) {
    for (int i = begin + threadIdx.y; i < end; i += 8) {
      const size_t at = static_cast<size_t>(i) * dim + j;
      acc += dout[at] * x[at] * rstd[i];
    }
  }
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && j < dim) {
    float s = 0;
    for (int k = 0; k < 8; ++k) s += part[k][threadIdx.x];
    if (gridDim.y == 1) {
      dw[j] += s;
    } else {
      atomicAdd(dw + j, s);
    }
  }
}

// Rows per chunk so that about 1024 blocks cover the reduction.
inline int weight_grad_rows_per_chunk(int n, int dim) {
  const int column_blocks = (dim + 31) / 32;
  const int chunks = std::max(1, std::min(n / 64, 1024 / column_blocks));
  return (n + chunks - 1) / chunks;
}

// The decode engine's fused residual add + norm (rmsnorm.h): each thread
// adds and squares its own elements, so the in-place update needs no
// barrier before the reduction.
// Rows of up to kAddNormPerThread * kThreads elements keep theirs in
// registers: the norm weight is read before the wait on the predecessor
// (no kernel writes it), x and delta in one round trip after it.
constexpr int kAddNormPerThread = 16;

// Where the norm's output is also coded for the FP8 tensor cores
// (add_rmsnorm_e4m3); codes null: not.
struct E4m3Rows {
  uint8_t* codes = nullptr;
  float* scales = nullptr;
  int n_pad = 0;
};

template <bool kInRegisters>
__global__ void add_rmsnorm_bf16_kernel(float* x, const float* delta, const float* w,
                                        Bf16Bits* out, int hidden, float eps, E4m3Rows e4m3, int n) {
  const size_t base = static_cast<size_t>(blockIdx.x) * hidden;
  if constexpr (kInRegisters) {
    float wv[kAddNormPerThread], xv[kAddNormPerThread];
#pragma unroll
    for (int k = 0; k < kAddNormPerThread; ++k) {
      const int j = threadIdx.x + k * blockDim.x;
      wv[k] = j < hidden ? __ldg(w + j) : 0.0f;
    }
    begin_dependent();
    if (e4m3.codes && static_cast<int>(blockIdx.x) >= n) {  // a padding row of the codes
      for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
        e4m3.codes[base + j] = 0;
        if (j % kFp8RowBlock == 0) e4m3.scales[static_cast<size_t>(j / kFp8RowBlock) * e4m3.n_pad + blockIdx.x] = 1.0f;
      }
      return;
    }
    float ss = 0;
#pragma unroll
    for (int k = 0; k < kAddNormPerThread; ++k) {
      const int j = threadIdx.x + k * blockDim.x;
      xv[k] = 0.0f;
      if (j < hidden) xv[k] = delta ? x[base + j] + delta[base + j] : x[base + j];
      ss += xv[k] * xv[k];
    }
    if (delta) {
#pragma unroll
      for (int k = 0; k < kAddNormPerThread; ++k) {
        const int j = threadIdx.x + k * blockDim.x;
        if (j < hidden) x[base + j] = xv[k];
      }
    }
    const float r = rsqrtf(block_reduce<false>(ss) / static_cast<float>(hidden) + eps);
#pragma unroll
    for (int k = 0; k < kAddNormPerThread; ++k) {
      const int j = threadIdx.x + k * blockDim.x;
      if (j < hidden) out[base + j] = to_bf16_bits(wv[k] * (xv[k] * r));
    }
    if (e4m3.codes) {
      // blockDim.x is kThreads: at step k warps 0-3 hold one 128-column
      // block of the row and warps 4-7 the next; each block's largest
      // magnitude meets in shared memory, then each thread codes its value
      // as quantize_rows_e4m3 codes the bf16 output.
      __shared__ float warp_amax[kAddNormPerThread][kThreads / 32];
      const int warp = static_cast<int>(threadIdx.x >> 5), first = (warp / 4) * 4;
#pragma unroll
      for (int k = 0; k < kAddNormPerThread; ++k) {
        const int j = threadIdx.x + k * blockDim.x;
        float a = j < hidden ? fabsf(__uint_as_float(uint32_t(to_bf16_bits(wv[k] * (xv[k] * r))) << 16)) : 0.0f;
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, offset));
        if ((threadIdx.x & 31) == 0) warp_amax[k][warp] = a;
      }
      __syncthreads();
#pragma unroll
      for (int k = 0; k < kAddNormPerThread; ++k) {
        const int j = threadIdx.x + k * blockDim.x;
        if (j >= hidden) continue;
        const float amax = fmaxf(fmaxf(warp_amax[k][first], warp_amax[k][first + 1]),
                                 fmaxf(warp_amax[k][first + 2], warp_amax[k][first + 3]));
        const float scale = fp8_rows_scale(amax);
        const float v = __uint_as_float(uint32_t(to_bf16_bits(wv[k] * (xv[k] * r))) << 16);
        e4m3.codes[base + j] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(v * (1.0f / scale), __NV_SATFINITE, __NV_E4M3));
        if (j % kFp8RowBlock == 0) e4m3.scales[static_cast<size_t>(j / kFp8RowBlock) * e4m3.n_pad + blockIdx.x] = scale;
      }
    }
  } else {
    begin_dependent();
    float ss = 0;
    for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
      float v = x[base + j];
      if (delta) x[base + j] = v = v + delta[base + j];
      ss += v * v;
    }
    const float r = rsqrtf(block_reduce<false>(ss) / static_cast<float>(hidden) + eps);
    for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
      out[base + j] = to_bf16_bits(w[j] * (x[base + j] * r));
    }
  }
}

// Four columns a thread, chunk / 4 threads a chunk; every thread runs
// every pass, so that the chunk's shuffles see whole warps.
__global__ void rms_chunks_bf16_kernel(const float* x, const float* w, Bf16Bits* out,
                                       float* sumsq, int hidden, int chunk) {
  begin_dependent();
  const size_t base = static_cast<size_t>(blockIdx.x) * hidden;
  const int quads = hidden / 4;
  for (int first = 0; first < quads; first += blockDim.x) {
    const int q = first + threadIdx.x;
    const bool live = q < quads;
    float4 v = make_float4(0, 0, 0, 0), g = v;
    if (live) {
      v = *reinterpret_cast<const float4*>(x + base + 4 * q);
      g = __ldg(reinterpret_cast<const float4*>(w) + q);
    }
    float ss = v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    const int threads = chunk / 4;
    for (int o = threads / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (!live) continue;
    *reinterpret_cast<uint2*>(out + base + 4 * q) =
        make_uint2(pack_bf16x2(v.x * g.x, v.y * g.y), pack_bf16x2(v.z * g.z, v.w * g.w));
    if (q % threads == 0) sumsq[static_cast<size_t>(blockIdx.x) * (hidden / chunk) + q / threads] = ss;
  }
}

void rms_chunks_bf16(const float* x, const float* w, Bf16Bits* out, float* sumsq, int n,
                     int hidden, CUstream_st* stream, int chunk) {
  COHORT_CHECK_MSG((chunk == 16 || chunk == 64) && hidden % chunk == 0,
                   "rms_chunks_bf16: hidden {} is not whole {}-column chunks", hidden, chunk);
  launch_dependent(rms_chunks_bf16_kernel, n, kThreads, 0, stream, x, w, out, sumsq, hidden, chunk);
}

// Steps of many rows (prefill) at widths of 512, 1,024 or 2,048: a warp a
// row, 8 rows a block, the row in registers as float4s and its sum of
// squares by shuffles. A block a row (above) spends most of its time
// starting blocks and meeting at barriers when a row is this short: at
// 16 x 1,984 prompt rows of the 0.6B shape it ran about 6 times below HBM's
// bandwidth.
constexpr int kNormRowsPerBlock = 8;

template <int kVecs>  // float4s a lane: hidden / 128
__global__ void add_rmsnorm_rows_bf16_kernel(float* x, const float* delta, const float* w, Bf16Bits* out, int n,
                                             float eps, E4m3Rows e4m3) {
  constexpr int kHidden = kVecs * 128;
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kNormRowsPerBlock + static_cast<int>(threadIdx.x >> 5);
  float4 wv[kVecs];
#pragma unroll
  for (int k = 0; k < kVecs; ++k) wv[k] = __ldg(reinterpret_cast<const float4*>(w) + lane + 32 * k);
  begin_dependent();
  if (row >= n) {
    if (e4m3.codes && row < e4m3.n_pad) {  // a padding row of the codes
#pragma unroll
      for (int k = 0; k < kVecs; ++k) {
        *reinterpret_cast<uint32_t*>(e4m3.codes + static_cast<size_t>(row) * kHidden + 128 * k + 4 * lane) = 0;
        if (lane == 0) e4m3.scales[static_cast<size_t>(k) * e4m3.n_pad + row] = 1.0f;
      }
    }
    return;
  }
  float4* xr = reinterpret_cast<float4*>(x + static_cast<size_t>(row) * kHidden);
  const float4* dr = delta ? reinterpret_cast<const float4*>(delta + static_cast<size_t>(row) * kHidden) : nullptr;
  float4 xv[kVecs];
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    float4 v = xr[lane + 32 * k];
    if (dr) {
      const float4 d = dr[lane + 32 * k];
      v.x += d.x, v.y += d.y, v.z += d.z, v.w += d.w;
      xr[lane + 32 * k] = v;
    }
    ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    xv[k] = v;
  }
  const float r = rsqrtf(warp_sum(ss) / static_cast<float>(kHidden) + eps);
  uint2* o = reinterpret_cast<uint2*>(out + static_cast<size_t>(row) * kHidden);
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const float4 v = xv[k], g = wv[k];
    const uint2 packed = make_uint2(pack_bf16x2(g.x * (v.x * r), g.y * (v.y * r)),
                                    pack_bf16x2(g.z * (v.z * r), g.w * (v.w * r)));
    o[lane + 32 * k] = packed;
    // Step k is the row's 128-column block k, the whole warp's.
    if (e4m3.codes) {
      e4m3_block(e4m3.codes + static_cast<size_t>(row) * kHidden + 128 * k + 4 * lane,
                 e4m3.scales + static_cast<size_t>(k) * e4m3.n_pad + row, packed.x, packed.y);
    }
  }
}

void add_rmsnorm_bf16(float* x, const float* delta, const float* w, Bf16Bits* out, int n,
                      int hidden, float eps, CUstream_st* stream) {
  if (n >= 32 && (hidden == 512 || hidden == 1024 || hidden == 2048)) {
    const unsigned blocks = static_cast<unsigned>((n + kNormRowsPerBlock - 1) / kNormRowsPerBlock);
    const unsigned threads = 32 * kNormRowsPerBlock;
    if (hidden == 512) {
      launch_dependent(add_rmsnorm_rows_bf16_kernel<4>, blocks, threads, 0, stream, x, delta, w, out, n, eps,
                       E4m3Rows{});
    } else if (hidden == 1024) {
      launch_dependent(add_rmsnorm_rows_bf16_kernel<8>, blocks, threads, 0, stream, x, delta, w, out, n, eps,
                       E4m3Rows{});
    } else {
      launch_dependent(add_rmsnorm_rows_bf16_kernel<16>, blocks, threads, 0, stream, x, delta, w, out, n, eps,
                       E4m3Rows{});
    }
    return;
  }
  if (hidden <= kAddNormPerThread * kThreads) {
    launch_dependent(add_rmsnorm_bf16_kernel<true>, n, kThreads, 0, stream, x, delta, w, out, hidden, eps,
                     E4m3Rows{}, n);
  } else {
    launch_dependent(add_rmsnorm_bf16_kernel<false>, n, kThreads, 0, stream, x, delta, w, out, hidden, eps,
                     E4m3Rows{}, n);
  }
}

bool add_rmsnorm_e4m3_supported(int hidden) {
  return hidden % kFp8RowBlock == 0 && hidden <= kAddNormPerThread * kThreads;
}

void add_rmsnorm_e4m3(float* x, const float* delta, const float* w, Bf16Bits* out, uint8_t* codes, float* scales,
                      int n, int n_pad, int hidden, float eps, CUstream_st* stream) {
  COHORT_CHECK_MSG(add_rmsnorm_e4m3_supported(hidden), "add_rmsnorm_e4m3: hidden {} is not supported", hidden);
  E4m3Rows e4m3;
  e4m3.codes = codes, e4m3.scales = scales, e4m3.n_pad = n_pad;
  if (n >= 32 && (hidden == 512 || hidden == 1024 || hidden == 2048)) {
    const unsigned blocks = static_cast<unsigned>((n_pad + kNormRowsPerBlock - 1) / kNormRowsPerBlock);
    const unsigned threads = 32 * kNormRowsPerBlock;
    if (hidden == 512) {
      launch_dependent(add_rmsnorm_rows_bf16_kernel<4>, blocks, threads, 0, stream, x, delta, w, out, n, eps, e4m3);
    } else if (hidden == 1024) {
      launch_dependent(add_rmsnorm_rows_bf16_kernel<8>, blocks, threads, 0, stream, x, delta, w, out, n, eps, e4m3);
    } else {
      launch_dependent(add_rmsnorm_rows_bf16_kernel<16>, blocks, threads, 0, stream, x, delta, w, out, n, eps, e4m3);
    }
    return;
  }
  launch_dependent(add_rmsnorm_bf16_kernel<true>, n_pad, kThreads, 0, stream, x, delta, w, out, hidden, eps, e4m3, n);
}

}  // namespace cohort::models::cuda
