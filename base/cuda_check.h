// The one way to check a CUDA runtime or cuBLAS call (NCCL's checks, which
// build on these, are private to collective/nccl/nccl_checks.h).
//
//   COHORT_CUDA_CHECK(call), COHORT_CUBLAS_CHECK(call)
//       library code: on failure, return a Status (kInternal) from the
//       enclosing function naming the call, file:line and CUDA's message.
//   COHORT_CUDA_CHECK_FATAL(call), COHORT_CUBLAS_CHECK_FATAL(call)
//       only where the path cannot return a Status (a Backend op, a kernel
//       launch, a step replayed from a CUDA graph): log the same and abort,
//       as COHORT_CHECK does.
//
// Header-only and included only by code that links CUDA; the control plane
// never sees it.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

#include "base/check.h"
#include "base/status.h"

namespace cohort {

inline Status cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  return internal_error(std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                        ": " + cudaGetErrorString(e));
}
// cuBLAS's status names, without calling into the library (it is opened at
// run time: models/cuda/cublas_api.h).
inline const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "an unknown cuBLAS status";
}
inline Status cublas_error(cublasStatus_t s, const char* call, const char* file, int line) {
  return internal_error(std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                        ": " + cublas_status_name(s));
}

}  // namespace cohort

#define COHORT_CUDA_CHECK(call)                                                  \
  do {                                                                           \
    cudaError_t cohort_cuda_e_ = (call);                                         \
    if (cohort_cuda_e_ != cudaSuccess)                                           \
      return ::cohort::cuda_error(cohort_cuda_e_, #call, __FILE__, __LINE__);    \
  } while (0)

#define COHORT_CUBLAS_CHECK(call)                                                \
  do {                                                                           \
    cublasStatus_t cohort_cublas_s_ = (call);                                    \
    if (cohort_cublas_s_ != CUBLAS_STATUS_SUCCESS)                               \
      return ::cohort::cublas_error(cohort_cublas_s_, #call, __FILE__, __LINE__); \
  } while (0)

#define COHORT_CUDA_CHECK_FATAL(call)                                            \
  do {                                                                           \
    cudaError_t cohort_cuda_e_ = (call);                                         \
    if (cohort_cuda_e_ != cudaSuccess) {                                         \
      spdlog::critical("CHECK failed at {}:{}: {}: {}", __FILE__, __LINE__, #call, \
                       cudaGetErrorString(cohort_cuda_e_));                      \
      spdlog::default_logger()->flush();                                         \
      std::abort();                                                              \
    }                                                                            \
  } while (0)

#define COHORT_CUBLAS_CHECK_FATAL(call)                                          \
  do {                                                                           \
    cublasStatus_t cohort_cublas_s_ = (call);                                    \
    if (cohort_cublas_s_ != CUBLAS_STATUS_SUCCESS) {                             \
      spdlog::critical("CHECK failed at {}:{}: {}: {}", __FILE__, __LINE__, #call, \
                       ::cohort::cublas_status_name(cohort_cublas_s_));          \
      spdlog::default_logger()->flush();                                         \
      std::abort();                                                              \
    }                                                                            \
  } while (0)
