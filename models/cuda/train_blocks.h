// The CUDA backend's BlockEngine (models/block_engine.h), built in its own
// translation unit (train_blocks.cu) so that it compiles beside the
// backend's. Only CUDA sources include this header.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <functional>
#include <memory>

#include "models/backend.h"
#include "models/block_engine.h"
#include "models/cuda/op_times.h"
#include "models/ops/attention.h"

namespace cohort::models::cuda {

struct TrainBlocksContext {
  Backend* backend = nullptr;  // memory (alloc/free) and nothing else
  cublasHandle_t blas = nullptr;
  cudaStream_t stream = nullptr;
  // The registered bf16 working copy of [w, w + n), or null (the engine then
  // rounds the masters itself, as ZeRO-3 and FSDP2 gather fp32 weights).
  std::function<const void*(const float* w, size_t n)> working_bf16;
  OpTimes* times = nullptr;
  // kAuto: cuDNN's fused attention where the library loads and has an
  // engine for the shape, the flash kernels otherwise; kCudnn insists.
  AttentionBackend attention = AttentionBackend::kAuto;
};

// True when the engine handles this shape: head_dim 64 or 128, hidden and
// intermediate multiples of 8.
bool train_blocks_support(const BlockEngineShape& shape);
// Raises the attention kernels' shared-memory limits; once per device.
cudaError_t train_blocks_prepare();
std::unique_ptr<BlockEngine> make_train_blocks(const BlockEngineShape& shape,
                                               TrainBlocksContext context);

}  // namespace cohort::models::cuda
