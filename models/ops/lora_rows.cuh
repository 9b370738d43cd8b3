// CUDA per-row LoRA shrink and expand (contract and CPU reference:
// lora_rows.h). Shrink: a warp per (row, rank index), 4 a block, streaming
// its A row in 16-byte pieces; a warp whose row has no adapter (or whose
// index is past the adapter's rank) writes 0. Expand: a thread per output
// element, summing over the adapter's rank. Launched plainly: they follow
// projections whose outputs they read or add to.
#pragma once

#include "models/cuda/common.cuh"
#include "models/ops/lora_rows.h"

namespace cohort::models::cuda {

constexpr int kLoraWarps = 4;

__global__ void lora_shrink_kernel(float* t, const Bf16Bits* x, const Bf16Bits* const* a, const int32_t* ranks,
                                   const int32_t* row_adapter, int in, int r_max) {
  const int row = blockIdx.x;
  const int c = blockIdx.y * kLoraWarps + static_cast<int>(threadIdx.x / 32);
  const int lane = threadIdx.x % 32;
  if (c >= r_max) return;  // whole warps
  const int adapter = row_adapter[row];
  float sum = 0.0f;
  const Bf16Bits* w = adapter >= 0 && c < ranks[adapter] ? a[adapter] : nullptr;
  if (w) {  // the same for the whole warp
    w += static_cast<size_t>(c) * in;
    const Bf16Bits* xr = x + static_cast<size_t>(row) * in;
    for (int k = lane * 8; k < in; k += 32 * 8) {
      float wv[8], xv[8];
      unpack8_bf16(__ldg(reinterpret_cast<const uint4*>(w + k)), wv);
      unpack8_bf16(*reinterpret_cast<const uint4*>(xr + k), xv);
#pragma unroll
      for (int j = 0; j < 8; ++j) sum = fmaf(wv[j], xv[j], sum);
    }
    sum = warp_sum(sum);
  }
  if (lane == 0) t[static_cast<size_t>(row) * r_max + c] = sum;
}

__global__ void lora_expand_kernel(float* y, int y_stride, const float* t, const Bf16Bits* const* b,
                                   const int32_t* ranks, const float* scales, const int32_t* row_adapter, int n,
                                   int out, int r_max) {
  const size_t total = static_cast<size_t>(n) * out;
  for (size_t e = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int row = static_cast<int>(e / out), o = static_cast<int>(e % out);
    const int adapter = row_adapter[row];
    if (adapter < 0 || !b[adapter]) continue;
    const int rank = ranks[adapter];
    const Bf16Bits* br = b[adapter] + static_cast<size_t>(o) * rank;
    const float* tr = t + static_cast<size_t>(row) * r_max;
    float sum = 0.0f;
    for (int c = 0; c < rank; ++c) sum = fmaf(from_bf16_bits(br[c]), tr[c], sum);
    y[static_cast<size_t>(row) * y_stride + o] += scales[adapter] * sum;
  }
}

void lora_shrink_bf16(float* t, const Bf16Bits* x, const Bf16Bits* const* a, const int32_t* ranks,
                      const int32_t* row_adapter, int n, int in, int r_max, CUstream_st* stream) {
  if (n <= 0) return;
  const dim3 grid(n, (r_max + kLoraWarps - 1) / kLoraWarps);
  lora_shrink_kernel<<<grid, 32 * kLoraWarps, 0, stream>>>(t, x, a, ranks, row_adapter, in, r_max);
}

void lora_expand_bf16(float* y, int y_stride, const float* t, const Bf16Bits* const* b, const int32_t* ranks,
                      const float* scales, const int32_t* row_adapter, int n, int out, int r_max,
                      CUstream_st* stream) {
  const size_t total = static_cast<size_t>(n) * out;
  if (total == 0) return;
  lora_expand_kernel<<<grid_for(total), kThreads, 0, stream>>>(y, y_stride, t, b, ranks, scales, row_adapter, n,
                                                              out, r_max);
}

}  // namespace cohort::models::cuda
