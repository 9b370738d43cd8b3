// CUDA embedding (CPU reference and contract: embedding.h). Forward: one
// block per token copies its row (or zeros outside the vocab shard).
// Backward: fp32 atomicAdd into the table gradient, since tokens repeat.
#pragma once

#include "models/cuda/common.cuh"

namespace cohort::models::cuda {

__global__ void embedding_forward_kernel(float* out, const int32_t* ids, const float* table,
                                         int dim, int vocab_begin, int rows) {
  const int i = blockIdx.x;
  const int row = ids[i] - vocab_begin;
  const bool inside = row >= 0 && row < rows;
  float* o = out + static_cast<size_t>(i) * dim;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) {
    o[j] = inside ? table[static_cast<size_t>(row) * dim + j] : 0.0f;
  }
}

__global__ void embedding_backward_kernel(float* dtable, const float* dout, const int32_t* ids,
                                          int dim, int vocab_begin, int rows) {
  const int i = blockIdx.x;
  const int row = ids[i] - vocab_begin;
  if (row < 0 || row >= rows) return;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) {
    atomicAdd(dtable + static_cast<size_t>(row) * dim + j, dout[static_cast<size_t>(i) * dim + j]);
  }
}

}  // namespace cohort::models::cuda
