// The CUDA backend: device memory from a caching pool, the kernels of
// models/ops/*.cuh and cuBLAS GEMMs on one stream (see ops/linear.cuh for the
// bf16-tensor-core / fp32-accumulate numerics). Built only when the toolkit
// was found (COHORT_HAVE_CUDA); cuda_device_count() exists in every build so
// tests and workers can ask without #ifdefs.
//
// All work is issued on stream(); copy_to_host synchronises it. A
// TensorParallelComm given to a model on this backend receives device
// pointers and must order its collectives after the work already on stream()
// (NCCL: pass stream() to the NCCL calls).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "models/backend.h"

namespace cohort::models {

// Number of CUDA devices visible (0 without a GPU or without CUDA support).
int cuda_device_count();

#ifdef COHORT_HAVE_CUDA
struct CudaBackendStats {
  size_t reserved_bytes = 0;
  size_t in_use_bytes = 0;
  int64_t device_allocations = 0;  // cudaMalloc calls so far
};

class CudaBackend : public Backend {
 public:
  virtual void* stream() const = 0;  // cudaStream_t
  virtual CudaBackendStats stats() const = 0;
  virtual void synchronize() = 0;
  // With CudaBackendOptions::op_times: GPU milliseconds per op so far,
  // largest first (synchronises); empty otherwise.
  virtual std::vector<std::pair<std::string, double>> op_times_ms() = 0;
};

struct CudaBackendOptions {
  bool op_times = false;  // time every op with CUDA events (a debugging switch)
};

// Errors when the device does not exist or cannot be initialised.
Result<std::unique_ptr<CudaBackend>> make_cuda_backend(int device = 0, CudaBackendOptions options = {});

// Process-wide: kernels launch only after their predecessor has finished
// (no programmatic dependent launch), so that a kernel timer sees each
// kernel's own time. Off by default; a debugging switch.
void set_serial_kernel_launches(bool on);
#endif

}  // namespace cohort::models
