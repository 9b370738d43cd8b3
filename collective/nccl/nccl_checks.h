// Checked NCCL calls for the nccl backend (CUDA calls: base/cuda_check.h,
// the same Status family), and the mapping of cohort's dtypes and
// reductions onto NCCL's. Private to collective/nccl/.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "base/cuda_check.h"
#include "base/status.h"
#include "collective/types.h"

namespace cohort::collective {

inline Status nccl_error(ncclResult_t r, const char* call, const char* file, int line) {
  return internal_error(std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                        ": " + ncclGetErrorString(r));
}

// ncclInProgress is not a failure on a non-blocking communicator: the call
// finishes in the background and the caller waits for it.
#define COHORT_NCCL_CHECK(call)                                                           \
  do {                                                                                    \
    ncclResult_t cohort_nccl_r_ = (call);                                                 \
    if (cohort_nccl_r_ != ncclSuccess && cohort_nccl_r_ != ncclInProgress)                \
      return ::cohort::collective::nccl_error(cohort_nccl_r_, #call, __FILE__, __LINE__); \
  } while (0)

inline ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    case DType::kU8:
      return ncclUint8;
  }
  return ncclUint8;
}

inline ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return ncclSum;
}

}  // namespace cohort::collective
