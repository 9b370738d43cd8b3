// The tensor-parallel communication models/ needs, as callbacks, so that the
// model library never depends on collective/. parallel/ fills this in with its
// tensor-parallel sub-communicator; with tp_size 1 it stays empty and the
// model never calls it.
//
// Pointers are in the memory of the model's backend (host for CPU, device for
// CUDA). Every rank of the TP group calls the same callbacks in the same order
// with the same sizes. Where the model calls them:
//   forward:  after the vocab-parallel embedding lookup      (all_reduce_sum)
//             after o_proj and after down_proj (row-parallel) (all_reduce_sum)
//             cross-entropy over the vocab shard             (all_reduce_max, all_reduce_sum)
//             full-vocab logits for generation               (all_gather)
//   backward: the input gradients of q/k/v, of gate/up and of the LM head
//             (column-parallel layers see only part of the sum) (all_reduce_sum)
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>

#include "base/status.h"

namespace cohort::models {

struct TensorParallelComm {
  std::function<void(float* data, size_t n)> all_reduce_sum;
  std::function<void(float* data, size_t n)> all_reduce_max;
  // Concatenates each rank's `n_local` floats in rank order into `gathered`.
  std::function<void(const float* local, float* gathered, size_t n_local)> all_gather;
};

// The tensor-parallel collectives of an executor that enqueues them on a CUDA
// stream and never waits for them on the host, so that CUDA graphs capture
// them with its kernels (the decode engine, models/decode/). The executor
// runs on `stream`, so its kernels and the collectives need no cross-stream
// events. The caller (worker/) builds the group; models/ never sees how.
struct EnqueuedTensorParallel {
  int size = 1;
  int rank = 0;
  void* stream = nullptr;  // cudaStream_t the collectives are ordered on
  // How long a step may wait on its peers before the rank gives up.
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  std::function<void(float* data, size_t n)> all_reduce_sum;
  // Concatenates each rank's `n_local` floats in rank order into `gathered`.
  std::function<void(const float* local, float* gathered, size_t n_local)> all_gather;
  // A failed launch or an aborted group, reported at once; ok while healthy.
  std::function<Status()> async_error;
  std::shared_ptr<void> owner;  // the communicator behind the callbacks
};

// Builds the group for a decode engine on the calling thread (which has
// made the engine's device current); the engine calls it while its weights
// are read, since bringing up a GPU group takes a while.
using EnqueuedTensorParallelFactory = std::function<Result<EnqueuedTensorParallel>()>;

}  // namespace cohort::models
