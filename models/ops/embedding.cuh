// CUDA embedding (CPU reference and contract: embedding.h). Forward: one
// block per token copies its row (or zeros outside the vocab shard).
// Backward: fp32 atomicAdd into the table gradient, since tokens repeat.
// The decode engine's bf16 lookup and row gather have the same shape: one
// block per output row.
#pragma once

#include "models/cuda/common.cuh"
#include "models/ops/embedding.h"

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

__global__ void embed_bf16_kernel(float* x, const Bf16Bits* table, const int32_t* tokens,
                                  int hidden, int vocab_begin, int vocab_rows) {
  begin_dependent();
  const int r = blockIdx.x;
  const int row = tokens[r] - vocab_begin;
  const bool mine = row >= 0 && row < vocab_rows;
  for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
    x[static_cast<size_t>(r) * hidden + j] =
        mine ? from_bf16_bits(table[static_cast<size_t>(row) * hidden + j]) : 0.0f;
  }
}

__global__ void gather_rows_bf16_kernel(Bf16Bits* dst, const Bf16Bits* src, const int32_t* idx,
                                        int hidden) {
  begin_dependent();
  const Bf16Bits* row = src + static_cast<size_t>(idx[blockIdx.x]) * hidden;
  for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
    dst[static_cast<size_t>(blockIdx.x) * hidden + j] = row[j];
  }
}

// The fp32 form (Backend::gather_rows; a sparse layer's rows sorted by
// expert): one block per row.
__global__ void gather_rows_kernel(float* dst, const float* src, const int32_t* idx, int dim) {
  const float* row = src + static_cast<size_t>(idx[blockIdx.x]) * dim;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) dst[static_cast<size_t>(blockIdx.x) * dim + j] = row[j];
}

void embed_bf16(float* x, const Bf16Bits* table, const int32_t* tokens, int n, int hidden,
                int vocab_begin, int vocab_rows, CUstream_st* stream) {
  launch_dependent(embed_bf16_kernel, n, kThreads, 0, stream, x, table, tokens, hidden, vocab_begin,
                                                vocab_rows);
}

void gather_rows_bf16(Bf16Bits* dst, const Bf16Bits* src, const int32_t* idx, int k, int hidden,
                      CUstream_st* stream) {
  launch_dependent(gather_rows_bf16_kernel, k, kThreads, 0, stream, dst, src, idx, hidden);
}

}  // namespace cohort::models::cuda
