// CUDA LoRA in the dense form (contract: lora_rows.h, lora_dense_bf16;
// CPU reference: lora_shrink, then lora_expand per target, with the mask's
// own reference lora_mask).
//
// Row-major y = x Wᵀ is column-major yᵀ = W xᵀ, so each GEMM below names
// the row-major factors swapped: the shrink is column-major
// tᵀ [C·count, n] = A · xᵀ, each expand yᵀ_z [width_z, n] += B_z · maskedᵀ_z
// with y's row stride as its leading dimension. Both read bf16 and sum in
// fp32 on the tensor cores (CUBLAS_COMPUTE_32F).
#pragma once

#include "base/check.h"
#include "models/cuda/common.cuh"
#include "models/cuda/cublas_api.h"
#include "models/ops/lora_rows.h"

namespace cohort::models::cuda {

__global__ void lora_mask_kernel(Bf16Bits* out, const float* t, const int32_t* row_adapter, const int32_t* column,
                                 const int32_t* ranks, const float* scales, int n, int width, int columns) {
  const size_t total = static_cast<size_t>(n) * width;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int r = static_cast<int>(i / width), c = static_cast<int>(i % width) % columns;
    const int s = row_adapter[r];
    float v = 0.0f;
    if (s >= 0) {
      const int first = column[s];
      if (c >= first && c < first + ranks[s]) v = scales[s] * t[i];
    }
    out[i] = to_bf16_bits(v);
  }
}

void lora_mask_bf16(Bf16Bits* out, const float* t, const int32_t* row_adapter, const int32_t* column,
                    const int32_t* ranks, const float* scales, int n, int width, int columns, CUstream_st* stream) {
  if (n <= 0 || width <= 0) return;
  COHORT_CHECK_MSG(columns > 0 && width % columns == 0, "LoRA mask: width {} over {} columns", width, columns);
  const size_t total = static_cast<size_t>(n) * width;
  lora_mask_kernel<<<grid_for(total), kThreads, 0, stream>>>(out, t, row_adapter, column, ranks, scales, n, width,
                                                             columns);
  COHORT_CUDA_CHECK_FATAL(cudaGetLastError());
}

void lora_dense_bf16(cublasContext* blas, float* y, int y_stride, const Bf16Bits* x, const LoraDense& dense,
                     const int32_t* ranks, const float* scales, const int32_t* row_adapter, int n, int in,
                     const LoraTargets& targets, CUstream_st* stream) {
  const int C = dense.columns, width = targets.count * C;
  if (n <= 0 || C <= 0) return;
  COHORT_CHECK_MSG(C <= kLoraDenseMaxColumns && targets.count <= kLoraMaxTargets,
                   "LoRA dense form: {} columns over {} targets", C, targets.count);
  const blas::Api& api = blas::loaded();
  COHORT_CUBLAS_CHECK_FATAL(api.set_stream(blas, stream));
  const float one = 1.0f, zero = 0.0f;
  COHORT_CUBLAS_CHECK_FATAL(api.gemm_ex(blas, CUBLAS_OP_T, CUBLAS_OP_N, width, n, in, &one, dense.a, CUDA_R_16BF, in,
                                        x, CUDA_R_16BF, in, &zero, dense.t, CUDA_R_32F, width, CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT));
  lora_mask_bf16(dense.masked, dense.t, row_adapter, dense.column, ranks, scales, n, width, C, stream);
  for (int z = 0; z < targets.count; ++z) {
    COHORT_CHECK_MSG(dense.b[z], "LoRA dense form: no B for target {}", z);
    COHORT_CUBLAS_CHECK_FATAL(api.gemm_ex(blas, CUBLAS_OP_T, CUBLAS_OP_N, targets.width[z], n, C, &one, dense.b[z],
                                          CUDA_R_16BF, C, dense.masked + static_cast<size_t>(z) * C, CUDA_R_16BF,
                                          width, &one, y + targets.column[z], CUDA_R_32F, y_stride,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace cohort::models::cuda
