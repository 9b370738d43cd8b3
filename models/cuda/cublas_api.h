// cuBLAS and cuBLASLt, loaded at run time.
//
// cohort does not link them: libcublasLt's start-up (its static
// initializers and some 200 MiB of mappings) costs every process about half
// a second, which a CPU rank, the control plane's tools and each test
// process would pay for nothing. The libraries are opened, through the
// loader's search path as linking would have found them, when the first
// CUDA backend starts; only the entry points cohort calls are looked up.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include "base/status.h"

namespace cohort::models::cuda::blas {

// The entry points, resolved once per process.
struct Api {
  decltype(&::cublasCreate_v2) create;
  decltype(&::cublasDestroy_v2) destroy;
  decltype(&::cublasSetStream_v2) set_stream;
  // A workspace of the caller's, so that GEMMs captured into CUDA graphs
  // allocate nothing.
  decltype(&::cublasSetWorkspace_v2) set_workspace;
  // The exported forms (the header adds inline overloads taking a
  // cudaDataType compute type).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int m, int n,
                            int k, const void* alpha, const void* a, cudaDataType a_type, int lda,
                            const void* b, cudaDataType b_type, int ldb, const void* beta, void* c,
                            cudaDataType c_type, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo);
  cublasStatus_t (*gemm_strided_batched_ex)(
      cublasHandle_t, cublasOperation_t, cublasOperation_t, int m, int n, int k, const void* alpha,
      const void* a, cudaDataType a_type, int lda, long long stride_a, const void* b,
      cudaDataType b_type, int ldb, long long stride_b, const void* beta, void* c,
      cudaDataType c_type, int ldc, long long stride_c, int batch, cublasComputeType_t compute,
      cublasGemmAlgo_t algo);
  // Problems of different sizes in one call (the experts' GEMMs): sizes
  // and scalars per group on the host, the operands' pointers on the device.
  decltype(&::cublasGemmGroupedBatchedEx) gemm_grouped_batched_ex;
  decltype(&::cublasLtCreate) lt_create;
  decltype(&::cublasLtDestroy) lt_destroy;
  decltype(&::cublasLtMatmulDescCreate) matmul_desc_create;
  decltype(&::cublasLtMatmulDescDestroy) matmul_desc_destroy;
  decltype(&::cublasLtMatmulDescSetAttribute) matmul_desc_set_attribute;
  decltype(&::cublasLtMatrixLayoutCreate) layout_create;
  decltype(&::cublasLtMatrixLayoutDestroy) layout_destroy;
  decltype(&::cublasLtMatmulPreferenceCreate) preference_create;
  decltype(&::cublasLtMatmulPreferenceDestroy) preference_destroy;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) preference_set_attribute;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) algo_heuristic;
  decltype(&::cublasLtMatmul) matmul;
};

// The loaded libraries, or why there are none (not found, a missing
// symbol). Loaded once; later calls return the same answer.
Result<const Api*> api();

// The table, for code that runs only on a CUDA backend (which loaded it
// when it started): aborts naming the reason if it could not be loaded.
const Api& loaded();

// Whether this process has opened the libraries (tests check that CPU
// work never does).
bool opened();

}  // namespace cohort::models::cuda::blas
