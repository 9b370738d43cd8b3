// CUDA linear (CPU reference and contract: linear.h) on cuBLAS.
//
// Row-major y = x W^T is column-major y^T = W x^T, so every GEMM below is
// the row-major formula with operands swapped. Inputs are fp32 in memory and
// the GEMMs run with the compute type of the backend's matmul precision:
// CUBLAS_COMPUTE_32F_FAST_16BF (default) or _FAST_16F round the operands to
// bf16 or fp16 on the tensor cores and accumulate in fp32 — the numerics of
// half weights and activations with fp32 accumulation; CUBLAS_COMPUTE_32F
// multiplies in fp32. Parity tolerances against the fp32 CPU reference
// follow from that (about 1e-2 relative for bf16).
#pragma once

#include "models/cuda/common.cuh"

namespace cohort::models::cuda {

inline void gemm(const Blas& h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                 float alpha, const float* a, int lda, const float* b, int ldb, float beta,
                 float* c, int ldc) {
  COHORT_CUBLAS_CHECK(cublasGemmEx(h.handle, ta, tb, m, n, k, &alpha, a, CUDA_R_32F, lda, b,
                                   CUDA_R_32F, ldb, &beta, c, CUDA_R_32F, ldc, h.compute,
                                   CUBLAS_GEMM_DEFAULT));
}

inline void gemm_strided(const Blas& h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                         int k, float alpha, const float* a, int lda, long long sa, const float* b,
                         int ldb, long long sb, float beta, float* c, int ldc, long long sc,
                         int batch) {
  COHORT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      h.handle, ta, tb, m, n, k, &alpha, a, CUDA_R_32F, lda, sa, b, CUDA_R_32F, ldb, sb, &beta, c,
      CUDA_R_32F, ldc, sc, batch, h.compute, CUBLAS_GEMM_DEFAULT));
}

__global__ void add_bias_kernel(float* y, const float* b, int n, int out) {
  const size_t total = static_cast<size_t>(n) * out;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    y[i] += b[i % out];
  }
}

// db[j] += sum_i dy[i, j]: one thread per column (coalesced in j) over a
// chunk of rows per blockIdx.y; chunks meet in an fp32 atomicAdd.
__global__ void bias_backward_kernel(float* db, const float* dy, int n, int out,
                                     int rows_per_chunk) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= out) return;
  const int begin = blockIdx.y * rows_per_chunk, end = min(n, begin + rows_per_chunk);
  float s = 0;
  for (int i = begin; i < end; ++i) s += dy[static_cast<size_t>(i) * out + j];
  if (gridDim.y == 1) {
    db[j] += s;
  } else {
    atomicAdd(db + j, s);
  }
}

inline void linear_forward(const Blas& h, cudaStream_t stream, float* y, const float* x,
                           const float* w, const float* b, int n, int in, int out) {
  gemm(h, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, 1.0f, w, in, x, in, 0.0f, y, out);
  if (b)
    add_bias_kernel<<<grid_for(static_cast<size_t>(n) * out), kThreads, 0, stream>>>(y, b, n, out);
}

inline void linear_backward(const Blas& h, cudaStream_t stream, float* dx, float* dw, float* db,
                            const float* dy, const float* x, const float* w, int n, int in,
                            int out) {
  if (dx) gemm(h, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, 1.0f, w, in, dy, out, 1.0f, dx, in);
  gemm(h, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, 1.0f, x, in, dy, out, 1.0f, dw, in);
  if (db) {
    const int rows = 64;
    const dim3 grid((out + kThreads - 1) / kThreads, (n + rows - 1) / rows);
    bias_backward_kernel<<<grid, kThreads, 0, stream>>>(db, dy, n, out, rows);
  }
}

}  // namespace cohort::models::cuda
