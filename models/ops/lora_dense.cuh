// CUDA LoRA in the dense form (contract: lora_rows.h, lora_dense_bf16;
// CPU reference: lora_shrink, then lora_expand per target, with the mask's
// own reference lora_mask).
//
// Row-major y = x Wᵀ is column-major yᵀ = W xᵀ, so each GEMM below names
// the row-major factors swapped: the shrink is column-major
// tᵀ [C·count, n] = A · xᵀ, the expand yᵀ [Σ width, n] += B · maskedᵀ
// with y's row stride as its leading dimension. Both read bf16 and sum in
// fp32 on the tensor cores (CUBLAS_COMPUTE_32F).
#pragma once

#include "base/check.h"
#include "models/cuda/common.cuh"
#include "models/cuda/cublas_api.h"
#include "models/ops/gemv.h"
#include "models/ops/lora_rows.h"

namespace cohort::models::cuda {

// One block a row: the row's adapter is uniform over the block, and a
// folded norm's factor is the row's sum over its chunks, taken once.
constexpr int kLoraMaskThreads = 128;

__global__ void __launch_bounds__(kLoraMaskThreads)
    lora_mask_kernel(Bf16Bits* out, const float* t, const int32_t* row_adapter, const int32_t* column,
                     const int32_t* ranks, const float* scales, int width, int columns, LoraInputNorm norm, int in) {
  __shared__ float factor;
  const int r = static_cast<int>(blockIdx.x);
  const int s = row_adapter[r];
  const size_t row = static_cast<size_t>(r) * width;
  if (s < 0) {
    for (int i = static_cast<int>(threadIdx.x); i < width; i += kLoraMaskThreads) out[row + i] = 0;
    return;
  }
  if (threadIdx.x < 32) {
    float sum = 0.0f;
    if (norm.sumsq) {
      const int chunks = in / kNormChunk;
      for (int c = static_cast<int>(threadIdx.x); c < chunks; c += 32) sum += norm.sumsq[static_cast<size_t>(r) * chunks + c];
      for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    }
    if (threadIdx.x == 0) factor = scales[s] * (norm.sumsq ? rsqrtf(sum / static_cast<float>(in) + norm.eps) : 1.0f);
  }
  __syncthreads();
  const int first = column[s], last = first + ranks[s];
  for (int i = static_cast<int>(threadIdx.x); i < width; i += kLoraMaskThreads) {
    const int c = i % columns;
    out[row + i] = to_bf16_bits(c >= first && c < last ? factor * t[row + i] : 0.0f);
  }
}

void lora_mask_bf16(Bf16Bits* out, const float* t, const int32_t* row_adapter, const int32_t* column,
                    const int32_t* ranks, const float* scales, int n, int width, int columns, CUstream_st* stream,
                    const LoraInputNorm& norm, int in) {
  if (n <= 0 || width <= 0) return;
  COHORT_CHECK_MSG(columns > 0 && width % columns == 0, "LoRA mask: width {} over {} columns", width, columns);
  COHORT_CHECK_MSG(!norm.sumsq || in % kNormChunk == 0, "LoRA mask: a folded norm over {} inputs", in);
  lora_mask_kernel<<<n, kLoraMaskThreads, 0, stream>>>(out, t, row_adapter, column, ranks, scales, width, columns,
                                                        norm, in);
  COHORT_CUDA_CHECK_FATAL(cudaGetLastError());
}

void lora_dense_shrink_bf16(cublasContext* blas, const Bf16Bits* x, const LoraDense& dense, const int32_t* ranks,
                            const float* scales, const int32_t* row_adapter, int n, int in, int count,
                            CUstream_st* stream, const LoraInputNorm& norm) {
  const int C = dense.columns, width = count * C;
  if (n <= 0 || C <= 0) return;
  COHORT_CHECK_MSG(C <= kLoraDenseMaxColumns && count <= kLoraMaxTargets, "LoRA dense form: {} columns over {} "
                   "targets", C, count);
  const blas::Api& api = blas::loaded();
  COHORT_CUBLAS_CHECK_FATAL(api.set_stream(blas, stream));
  const float one = 1.0f, zero = 0.0f;
  COHORT_CUBLAS_CHECK_FATAL(api.gemm_ex(blas, CUBLAS_OP_T, CUBLAS_OP_N, width, n, in, &one, dense.a, CUDA_R_16BF, in,
                                        x, CUDA_R_16BF, in, &zero, dense.t, CUDA_R_32F, width, CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT));
  lora_mask_bf16(dense.masked, dense.t, row_adapter, dense.column, ranks, scales, n, width, C, stream, norm, in);
}

void lora_dense_expand_bf16(cublasContext* blas, float* y, int y_stride, const LoraDense& dense, int n,
                            const LoraTargets& targets, CUstream_st* stream) {
  const int C = dense.columns, width = targets.count * C;
  if (n <= 0 || C <= 0) return;
  int outputs = 0;
  for (int z = 0; z < targets.count; ++z) {
    COHORT_CHECK_MSG(targets.column[z] == targets.column[0] + outputs, "LoRA dense form: target {} is not beside "
                     "the one before it", z);
    outputs += targets.width[z];
  }
  COHORT_CHECK_MSG(dense.b, "LoRA dense form: no B");
  const blas::Api& api = blas::loaded();
  COHORT_CUBLAS_CHECK_FATAL(api.set_stream(blas, stream));
  const float one = 1.0f;
  COHORT_CUBLAS_CHECK_FATAL(api.gemm_ex(blas, CUBLAS_OP_T, CUBLAS_OP_N, outputs, n, width, &one, dense.b, CUDA_R_16BF,
                                        width, dense.masked, CUDA_R_16BF, width, &one, y + targets.column[0],
                                        CUDA_R_32F, y_stride, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// The gate/up expand with the activation (lora_swiglu_bf16): a thread a
// column i of the intermediate, a block a run of rows (in row_order, so that
// rows of one adapter follow each other). A row's deltas are its masked
// columns, in pieces of 8 from its adapter's first column rounded down to
// its last rounded up (the mask zeroes the columns around them), times the
// gate's and the up's row i of B. A thread keeps those B pieces while the
// next row takes the same adapter, up to kLoraSwigluKept of them (ranks to
// 32 at an aligned column); wider spans read them again a row, from L2.
constexpr int kLoraSwigluThreads = 128;
constexpr int kLoraSwigluKept = 4;

__device__ __forceinline__ float dot8_bf16(const uint4& w, const uint4& m) {
  float a[8], b[8];
  unpack8_bf16(w, a);
  unpack8_bf16(m, b);
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) sum = fmaf(a[j], b[j], sum);
  return sum;
}

__global__ void __launch_bounds__(kLoraSwigluThreads)
    lora_swiglu_kernel(Bf16Bits* h, const float* gate_up, const Bf16Bits* masked, const Bf16Bits* b,
                       const int32_t* row_adapter, const int32_t* row_order, const int32_t* column,
                       const int32_t* ranks, int n, int I, int C, int rows_per_block) {
  const int i = static_cast<int>(blockIdx.x) * kLoraSwigluThreads + static_cast<int>(threadIdx.x);
  if (i >= I) return;
  const size_t stride = 2 * static_cast<size_t>(C);
  const Bf16Bits* gate_b = b + static_cast<size_t>(i) * stride;           // its block: columns [0, C)
  const Bf16Bits* up_b = b + static_cast<size_t>(I + i) * stride + C;     // its block: columns [C, 2C)
  uint4 kept_gate[kLoraSwigluKept], kept_up[kLoraSwigluKept];
  int kept_from = -1, kept_pieces = 0;
  const int first = static_cast<int>(blockIdx.y) * rows_per_block, last = min(n, first + rows_per_block);
  for (int k = first; k < last; ++k) {
    const int r = row_order ? row_order[k] : k;
    const size_t at = static_cast<size_t>(r) * 2 * I + i;
    float g = gate_up[at], u = gate_up[at + I];
    const int s = row_adapter[r];
    if (s >= 0 && ranks[s] > 0) {
      const int from = column[s] & ~7, to = (column[s] + ranks[s] + 7) & ~7, pieces = (to - from) / 8;
      const uint4* gate_m = reinterpret_cast<const uint4*>(masked + static_cast<size_t>(r) * stride + from);
      const uint4* up_m = reinterpret_cast<const uint4*>(masked + static_cast<size_t>(r) * stride + C + from);
      if (pieces <= kLoraSwigluKept) {
        if (from != kept_from || pieces != kept_pieces) {
#pragma unroll
          for (int p = 0; p < kLoraSwigluKept; ++p) {
            if (p < pieces) {
              kept_gate[p] = *reinterpret_cast<const uint4*>(gate_b + from + 8 * p);
              kept_up[p] = *reinterpret_cast<const uint4*>(up_b + from + 8 * p);
            }
          }
          kept_from = from, kept_pieces = pieces;
        }
#pragma unroll
        for (int p = 0; p < kLoraSwigluKept; ++p) {
          if (p < pieces) g += dot8_bf16(kept_gate[p], gate_m[p]), u += dot8_bf16(kept_up[p], up_m[p]);
        }
      } else {
        for (int p = 0; p < pieces; ++p) {
          g += dot8_bf16(*reinterpret_cast<const uint4*>(gate_b + from + 8 * p), gate_m[p]);
          u += dot8_bf16(*reinterpret_cast<const uint4*>(up_b + from + 8 * p), up_m[p]);
        }
      }
    }
    h[static_cast<size_t>(r) * I + i] = to_bf16_bits(g / (1.0f + __expf(-g)) * u);
  }
}

void lora_swiglu_bf16(Bf16Bits* h, const float* gate_up, const LoraDense& dense, const int32_t* ranks,
                      const int32_t* row_adapter, const int32_t* row_order, int n, int I, CUstream_st* stream) {
  if (n <= 0) return;
  const int C = dense.columns;
  COHORT_CHECK_MSG(C > 0 && C % 8 == 0 && C <= kLoraDenseMaxColumns, "LoRA gate/up with the activation: {} columns",
                   C);
  COHORT_CHECK_MSG(dense.b && dense.masked, "LoRA gate/up with the activation: no B or masked rows");
  // Decode steps' few rows: short runs a block, for blocks enough to fill
  // the GPU; prompts' many: long runs, fewer B reloads.
  const int rows_per_block = n <= 64 ? 8 : 64;
  const dim3 grid((I + kLoraSwigluThreads - 1) / kLoraSwigluThreads, (n + rows_per_block - 1) / rows_per_block);
  lora_swiglu_kernel<<<grid, kLoraSwigluThreads, 0, stream>>>(h, gate_up, dense.masked, dense.b, row_adapter,
                                                              row_order, dense.column, ranks, n, I, C,
                                                              rows_per_block);
  COHORT_CUDA_CHECK_FATAL(cudaGetLastError());
}

void lora_dense_bf16(cublasContext* blas, float* y, int y_stride, const Bf16Bits* x, const LoraDense& dense,
                     const int32_t* ranks, const float* scales, const int32_t* row_adapter, int n, int in,
                     const LoraTargets& targets, CUstream_st* stream, const LoraInputNorm& norm) {
  lora_dense_shrink_bf16(blas, x, dense, ranks, scales, row_adapter, n, in, targets.count, stream, norm);
  lora_dense_expand_bf16(blas, y, y_stride, dense, n, targets, stream);
}

}  // namespace cohort::models::cuda
