// CUDA linear (CPU reference and contract: linear.h) on cuBLAS.
//
// Row-major y = x W^T is column-major y^T = W x^T, so every GEMM below is
// the row-major formula with operands swapped. Inputs are fp32 in memory.
// With a half matmul precision (bf16, fp16) the linear layers cast their
// operands to 16-bit copies first (round to nearest even, as the CPU
// emulation does) and run cuBLAS's native 16-bit tensor-core GEMMs with
// fp32 accumulation and fp32 output: half the bytes read, and kernels about
// 2.5x faster than letting cuBLAS convert fp32 operands itself
// (CUBLAS_COMPUTE_32F_FAST_16BF, which the attention GEMMs still use).
// CUBLAS_COMPUTE_32F multiplies in fp32. Parity tolerances against the fp32
// CPU reference follow (about 1e-2 relative for bf16).
#pragma once

#include "models/cuda/common.cuh"

namespace cohort::models::cuda {

// A GEMM operand in the type it is stored in.
struct Operand {
  const void* data;
  cudaDataType_t type;
};

inline void gemm_ex(const Blas& h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    float alpha, Operand a, int lda, Operand b, int ldb, float beta, float* c, int ldc,
                    cublasComputeType_t compute) {
  COHORT_CUBLAS_CHECK_FATAL(blas::loaded().gemm_ex(h.handle, ta, tb, m, n, k, &alpha, a.data, a.type, lda, b.data,
                                   b.type, ldb, &beta, c, CUDA_R_32F, ldc, compute,
                                   CUBLAS_GEMM_DEFAULT));
}

inline void gemm(const Blas& h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                 float alpha, const float* a, int lda, const float* b, int ldb, float beta,
                 float* c, int ldc) {
  gemm_ex(h, ta, tb, m, n, k, alpha, {a, CUDA_R_32F}, lda, {b, CUDA_R_32F}, ldb, beta, c, ldc,
          h.compute);
}

inline void gemm_strided(const Blas& h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                         int k, float alpha, const float* a, int lda, long long sa, const float* b,
                         int ldb, long long sb, float beta, float* c, int ldc, long long sc,
                         int batch) {
  COHORT_CUBLAS_CHECK_FATAL(blas::loaded().gemm_strided_batched_ex(
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

// Where the linear layers' 16-bit operand copies go (device memory the
// backend sizes for the largest call), and their type.
struct HalfOperands {
  void* x = nullptr;
  void* w = nullptr;
  void* dy = nullptr;
  cudaDataType_t type = CUDA_R_16BF;
};

inline Operand to_half(const HalfOperands& h, void* dst, const float* src, size_t n,
                       cudaStream_t stream) {
  if (h.type == CUDA_R_16BF) {
    cast_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(dst), src, n);
  } else {
    cast_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<__half*>(dst), src, n);
  }
  return {dst, h.type};
}

// `w_working`: the weights' registered 16-bit working copy, or null to cast
// them now.
inline Operand weight_operand(const HalfOperands& ops, const void* w_working, const float* w,
                              size_t n, cudaStream_t stream) {
  if (w_working) return {w_working, ops.type};
  return to_half(ops, ops.w, w, n, stream);
}

inline void linear_forward_half(const Blas& h, cudaStream_t stream, const HalfOperands& ops,
                                float* y, const float* x, const float* w, const void* w_working,
                                const float* b, int n, int in, int out) {
  const Operand xh = to_half(ops, ops.x, x, static_cast<size_t>(n) * in, stream);
  const Operand wh = weight_operand(ops, w_working, w, static_cast<size_t>(out) * in, stream);
  gemm_ex(h, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, 1.0f, wh, in, xh, in, 0.0f, y, out,
          CUBLAS_COMPUTE_32F);
  if (b)
    add_bias_kernel<<<grid_for(static_cast<size_t>(n) * out), kThreads, 0, stream>>>(y, b, n, out);
}

inline void linear_backward_half(const Blas& h, cudaStream_t stream, const HalfOperands& ops,
                                 float* dx, float* dw, float* db, const float* dy, const float* x,
                                 const float* w, const void* w_working, int n, int in, int out) {
  const Operand dyh = to_half(ops, ops.dy, dy, static_cast<size_t>(n) * out, stream);
  if (dx) {
    const Operand wh = weight_operand(ops, w_working, w, static_cast<size_t>(out) * in, stream);
    gemm_ex(h, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, 1.0f, wh, in, dyh, out, 1.0f, dx, in,
            CUBLAS_COMPUTE_32F);
  }
  if (dw) {  // null: a frozen weight, whose backward reads no x
    const Operand xh = to_half(ops, ops.x, x, static_cast<size_t>(n) * in, stream);
    gemm_ex(h, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, 1.0f, xh, in, dyh, out, 1.0f, dw, in,
            CUBLAS_COMPUTE_32F);
  }
  if (db) {
    const int rows = 64;
    const dim3 grid((out + kThreads - 1) / kThreads, (n + rows - 1) / rows);
    bias_backward_kernel<<<grid, kThreads, 0, stream>>>(db, dy, n, out, rows);
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
  if (dw) gemm(h, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, 1.0f, x, in, dy, out, 1.0f, dw, in);
  if (db) {
    const int rows = 64;
    const dim3 grid((out + kThreads - 1) / kThreads, (n + rows - 1) / rows);
    bias_backward_kernel<<<grid, kThreads, 0, stream>>>(db, dy, n, out, rows);
  }
}

}  // namespace cohort::models::cuda
