// CopyPlan on CUDA: the ranges live in device memory with, for each, the
// first of the fixed-size chunks (one block each) it is cut into; a block
// finds its range by binary search, so one launch copies every range with
// all SMs busy whatever the mix of sizes. Half sources are widened on the way.
#pragma once

#include "models/cuda/common.cuh"

namespace cohort::models::cuda {

struct DeviceCopyRange {
  unsigned long long dst, src, n, first_block;
};

constexpr size_t kCopyChunk = 8192;  // elements per block

template <typename From>
__global__ void copy_plan_kernel(float* dst, const From* src, const DeviceCopyRange* ranges, int count) {
  const unsigned long long block = blockIdx.x;
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (ranges[mid].first_block <= block) lo = mid;
    else hi = mid - 1;
  }
  const DeviceCopyRange r = ranges[lo];
  const size_t begin = static_cast<size_t>(block - r.first_block) * kCopyChunk;
  const size_t end = begin + kCopyChunk < r.n ? begin + kCopyChunk : r.n;
  for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    dst[r.dst + i] = static_cast<float>(src[r.src + i]);
}

}  // namespace cohort::models::cuda
