// CUDA greedy pick (CPU reference and contract: argmax.h). row_argmax: a
// cluster of kArgmaxCluster blocks of 1024 threads per row, each block a
// contiguous part of the row: a strided scan (each thread keeps its first
// maximum), warp-shuffle reductions preferring the lower index on ties,
// and the cluster's parts merged by its first block through distributed
// shared memory, so the result does not depend on scheduling.
// merge_argmax: one thread per row.
#pragma once

#include <cooperative_groups.h>

#include <cfloat>

#include "models/cuda/common.cuh"
#include "models/ops/argmax.h"

namespace cohort::models::cuda {

constexpr int kArgmaxThreads = 1024;
// A 151,936-entry row (608 KB) read by one multiprocessor took 17 us, a
// step's worth of several layers at batch 1: eight share it.
constexpr int kArgmaxCluster = 8;

// (value, index) that wins: the larger value, the lower index on ties.
__device__ __forceinline__ void argmax_keep(float& bv, int& bi, float ov, int oi) {
  if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
}

__device__ __forceinline__ void warp_argmax(float& bv, int& bi) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    argmax_keep(bv, bi, __shfl_xor_sync(0xffffffffu, bv, offset),
                __shfl_xor_sync(0xffffffffu, bi, offset));
  }
}

__global__ void __cluster_dims__(kArgmaxCluster, 1, 1)
    row_argmax_kernel(const float* logits, int V, int vocab_begin, float* out, int32_t* tokens) {
  begin_dependent();
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const int part = static_cast<int>(cluster.block_rank());
  const int r = blockIdx.x / kArgmaxCluster;
  __shared__ float warp_v[kArgmaxThreads / 32];
  __shared__ int warp_i[kArgmaxThreads / 32];
  __shared__ float block_v;
  __shared__ int block_i;
  const float* row = logits + static_cast<size_t>(r) * V;
  float bv = -FLT_MAX;
  int bi = 0x7fffffff;
  // Each thread scans ascending indices of this block's part and keeps its
  // first maximum (>).
  if (V % 4 == 0 && (reinterpret_cast<uintptr_t>(row) & 15) == 0) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    const int V4 = V / 4, per = (V4 + kArgmaxCluster - 1) / kArgmaxCluster;
    const int end = min(V4, (part + 1) * per);
    for (int j = part * per + threadIdx.x; j < end; j += blockDim.x) {
      const float4 v = row4[j];  // not __ldg: the logits are the predecessor's output
      if (v.x > bv) bv = v.x, bi = 4 * j;
      if (v.y > bv) bv = v.y, bi = 4 * j + 1;
      if (v.z > bv) bv = v.z, bi = 4 * j + 2;
      if (v.w > bv) bv = v.w, bi = 4 * j + 3;
    }
  } else {
    const int per = (V + kArgmaxCluster - 1) / kArgmaxCluster, end = min(V, (part + 1) * per);
    for (int j = part * per + threadIdx.x; j < end; j += blockDim.x) {
      if (row[j] > bv) bv = row[j], bi = j;
    }
  }
  warp_argmax(bv, bi);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_v[warp] = bv, warp_i[warp] = bi;
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x / 32;
    bv = lane < warps ? warp_v[lane] : -FLT_MAX;
    bi = lane < warps ? warp_i[lane] : 0x7fffffff;
    warp_argmax(bv, bi);
    if (lane == 0) block_v = bv, block_i = bi;
  }
  cluster.sync();  // every part's result is in its block's shared memory
  if (part == 0 && warp == 0) {
    bv = -FLT_MAX, bi = 0x7fffffff;
    if (lane < kArgmaxCluster) {
      bv = *cluster.map_shared_rank(&block_v, lane);
      bi = *cluster.map_shared_rank(&block_i, lane);
    }
    warp_argmax(bv, bi);
    if (lane == 0) {
      out[2 * r] = bv;
      out[2 * r + 1] = __int_as_float(bi + vocab_begin);
      if (tokens) tokens[r] = bi + vocab_begin;
    }
  }
  cluster.sync();  // the parts' shared memory stays until the first block has read it
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

__global__ void take_tokens_kernel(int32_t* rows, const int32_t* previous, const int32_t* source, int n) {
  begin_dependent();  // the previous step's picks
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b < n && source[b] >= 0) rows[b] = previous[source[b]];
}

void row_argmax(float* out, const float* logits, int n, int vocab_rows, int vocab_begin,
                CUstream_st* stream, int32_t* tokens) {
  launch_dependent(row_argmax_kernel, n * kArgmaxCluster, kArgmaxThreads, 0, stream, logits,
                   vocab_rows, vocab_begin, out, tokens);
}

void merge_argmax(int32_t* tokens, const float* gathered, int tp, int n, CUstream_st* stream) {
  launch_dependent(merge_argmax_kernel, (n + 127) / 128, 128, 0, stream, gathered, tp, n, tokens);
}

void take_tokens(int32_t* rows, const int32_t* previous, const int32_t* source, int n, CUstream_st* stream) {
  if (n > 0) launch_dependent(take_tokens_kernel, (n + 127) / 128, 128, 0, stream, rows, previous, source, n);
}

}  // namespace cohort::models::cuda
