// CUDA greedy pick (CPU reference and contract: argmax.h). row_argmax: one
// block of 1024 threads per row, a strided scan (each thread keeps its first
// maximum) then warp-shuffle reductions preferring the lower index on ties,
// so the result does not depend on scheduling. merge_argmax: one thread per
// row.
#pragma once

#include <cfloat>

#include "models/cuda/common.cuh"
#include "models/ops/argmax.h"

namespace cohort::models::cuda {

constexpr int kArgmaxThreads = 1024;

// (value, index) that wins: the larger value, the lower index on ties.
__device__ __forceinline__ void argmax_keep(float& bv, int& bi, float ov, int oi) {
  if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
}

// One block per row: a whole 151,936-entry row read by one multiprocessor in
// 16-byte loads (4 in flight per thread) takes a few microseconds; a decode
// step at batch 1 has no other work to overlap it with.
__global__ void row_argmax_kernel(const float* logits, int V, int vocab_begin, float* out) {
  begin_dependent();
  __shared__ float warp_v[kArgmaxThreads / 32];
  __shared__ int warp_i[kArgmaxThreads / 32];
  const float* row = logits + static_cast<size_t>(blockIdx.x) * V;
  float bv = -FLT_MAX;
  int bi = 0x7fffffff;
  // Each thread scans ascending indices and keeps its first maximum (>).
  if (V % 4 == 0 && (reinterpret_cast<uintptr_t>(row) & 15) == 0) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    const int V4 = V / 4;
    for (int j = threadIdx.x; j < V4; j += blockDim.x) {
      const float4 v = row4[j];  // not __ldg: the logits are the predecessor's output
      if (v.x > bv) bv = v.x, bi = 4 * j;
      if (v.y > bv) bv = v.y, bi = 4 * j + 1;
      if (v.z > bv) bv = v.z, bi = 4 * j + 2;
      if (v.w > bv) bv = v.w, bi = 4 * j + 3;
    }
  } else {
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
      if (row[j] > bv) bv = row[j], bi = j;
    }
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    argmax_keep(bv, bi, __shfl_xor_sync(0xffffffffu, bv, offset),
                __shfl_xor_sync(0xffffffffu, bi, offset));
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_v[warp] = bv, warp_i[warp] = bi;
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x / 32;
    bv = lane < warps ? warp_v[lane] : -FLT_MAX;
    bi = lane < warps ? warp_i[lane] : 0x7fffffff;
    for (int offset = 16; offset > 0; offset >>= 1) {
      argmax_keep(bv, bi, __shfl_xor_sync(0xffffffffu, bv, offset),
                  __shfl_xor_sync(0xffffffffu, bi, offset));
    }
    if (lane == 0) {
      out[2 * blockIdx.x] = bv;
      out[2 * blockIdx.x + 1] = __int_as_float(bi + vocab_begin);
    }
  }
}

__global__ void merge_argmax_kernel(const float* gathered, int tp, int n, int32_t* tokens) {
  begin_dependent();
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= n) return;
  float best = -FLT_MAX;
  int index = 0;
  for (int k = 0; k < tp; ++k) {  // ranks hold ascending vocab ranges
    const float* pair = gathered + (static_cast<size_t>(k) * n + r) * 2;
    if (k == 0 || pair[0] > best) best = pair[0], index = __float_as_int(pair[1]);
  }
  tokens[r] = index;
}

void row_argmax(float* out, const float* logits, int n, int vocab_rows, int vocab_begin,
                CUstream_st* stream) {
  launch_dependent(row_argmax_kernel, n, kArgmaxThreads, 0, stream, logits, vocab_rows, vocab_begin, out);
}

void merge_argmax(int32_t* tokens, const float* gathered, int tp, int n, CUstream_st* stream) {
  launch_dependent(merge_argmax_kernel, (n + 127) / 128, 128, 0, stream, gathered, tp, n, tokens);
}

}  // namespace cohort::models::cuda
