// CUDA per-row LoRA shrink and expand (contract and CPU reference:
// lora_rows.h), one launch for the targets that share an input. Shrink: a
// block of 4 warps per (row, target), each warp a quarter of the rank
// indices, streaming their A rows in 16-byte pieces; indices past the
// adapter's rank (all of them for a row without one) are written as 0, so
// a block does the rank's work, not the cap's (kGraphLoraRank). Expand: a thread per output element of its
// target, summing over the adapter's rank (B's row in 16-byte pieces where
// the rank is a multiple of 8). Both launch as dependents of the kernel
// before them (common.cuh): the tables, ranks and row indices are staged
// before the step, so each reads them before it waits.
#pragma once

#include "models/cuda/common.cuh"
#include "models/ops/lora_rows.h"

namespace cohort::models::cuda {

constexpr int kLoraWarps = 4;

__global__ void lora_shrink_kernel(float* t, const Bf16Bits* x, const Bf16Bits* const* a, const int32_t* ranks,
                                   const int32_t* row_adapter, int n, int in, int r_max, size_t table_stride) {
  const int row = blockIdx.x, z = blockIdx.z;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = threadIdx.x % 32;
  const int adapter = row_adapter[row];
  const Bf16Bits* w = adapter >= 0 ? a[z * table_stride + adapter] : nullptr;
  const int rank = w ? ranks[adapter] : 0;
  begin_dependent();
  float* tr = t + (static_cast<size_t>(z) * n + row) * r_max;
  const Bf16Bits* xr = x + static_cast<size_t>(row) * in;
  // Warp w takes indices w, w + kLoraWarps, ...: the adapter's rank of them
  // as dot products, the rest up to r_max as zeros.
  for (int c = warp; c < r_max; c += kLoraWarps) {
    float sum = 0.0f;
    if (c < rank) {  // the same for the whole warp
      const Bf16Bits* wc = w + static_cast<size_t>(c) * in;
      for (int k = lane * 8; k < in; k += 32 * 8) {
        float wv[8], xv[8];
        unpack8_bf16(__ldg(reinterpret_cast<const uint4*>(wc + k)), wv);
        unpack8_bf16(*reinterpret_cast<const uint4*>(xr + k), xv);
#pragma unroll
        for (int j = 0; j < 8; ++j) sum = fmaf(wv[j], xv[j], sum);
      }
      sum = warp_sum(sum);
    }
    if (lane == 0) tr[c] = sum;
  }
}

__global__ void lora_expand_kernel(float* y, int y_stride, const float* t, const Bf16Bits* const* b,
                                   const int32_t* ranks, const float* scales, const int32_t* row_adapter, int n,
                                   int r_max, size_t table_stride, LoraTargets targets) {
  const int z = blockIdx.y, out = targets.width[z], column = targets.column[z];
  const size_t total = static_cast<size_t>(n) * out;
  begin_dependent();
  for (size_t e = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int row = static_cast<int>(e / out), o = static_cast<int>(e % out);
    const int adapter = row_adapter[row];
    if (adapter < 0) continue;
    const Bf16Bits* bz = b[z * table_stride + adapter];
    if (!bz) continue;
    const int rank = ranks[adapter];
    const Bf16Bits* br = bz + static_cast<size_t>(o) * rank;
    const float* tr = t + (static_cast<size_t>(z) * n + row) * r_max;
    float sum = 0.0f;
    if (rank % 8 == 0) {
      for (int c = 0; c < rank; c += 8) {
        float bv[8];
        unpack8_bf16(__ldg(reinterpret_cast<const uint4*>(br + c)), bv);
#pragma unroll
        for (int j = 0; j < 8; ++j) sum = fmaf(bv[j], tr[c + j], sum);
      }
    } else {
      for (int c = 0; c < rank; ++c) sum = fmaf(from_bf16_bits(br[c]), tr[c], sum);
    }
    y[static_cast<size_t>(row) * y_stride + column + o] += scales[adapter] * sum;
  }
}

void lora_shrink_bf16(float* t, const Bf16Bits* x, const Bf16Bits* const* a, const int32_t* ranks,
                      const int32_t* row_adapter, int n, int in, int r_max, const LoraTargets& targets,
                      CUstream_st* stream) {
  if (n <= 0) return;
  const dim3 grid(n, 1, targets.count);
  launch_dependent(lora_shrink_kernel, grid, 32 * kLoraWarps, 0, stream, t, x, a, ranks, row_adapter, n, in, r_max,
                   targets.table_stride);
}

void lora_expand_bf16(float* y, int y_stride, const float* t, const Bf16Bits* const* b, const int32_t* ranks,
                      const float* scales, const int32_t* row_adapter, int n, int r_max, const LoraTargets& targets,
                      CUstream_st* stream) {
  int widest = 0;
  for (int z = 0; z < targets.count; ++z) widest = std::max(widest, targets.width[z]);
  const size_t total = static_cast<size_t>(n) * widest;
  if (total == 0) return;
  const dim3 grid(grid_for(total), targets.count);
  launch_dependent(lora_expand_kernel, grid, kThreads, 0, stream, y, y_stride, t, b, ranks, scales, row_adapter, n,
                   r_max, targets.table_stride, targets);
}

void lora_shrink_bf16(float* t, const Bf16Bits* x, const Bf16Bits* const* a, const int32_t* ranks,
                      const int32_t* row_adapter, int n, int in, int r_max, CUstream_st* stream) {
  lora_shrink_bf16(t, x, a, ranks, row_adapter, n, in, r_max, LoraTargets{}, stream);
}

void lora_expand_bf16(float* y, int y_stride, const float* t, const Bf16Bits* const* b, const int32_t* ranks,
                      const float* scales, const int32_t* row_adapter, int n, int out, int r_max,
                      CUstream_st* stream) {
  LoraTargets one;
  one.width[0] = out;
  lora_expand_bf16(y, y_stride, t, b, ranks, scales, row_adapter, n, r_max, one, stream);
}

}  // namespace cohort::models::cuda
