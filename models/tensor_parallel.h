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
#include <vector>

#include "base/status.h"

namespace cohort::models {

struct TensorParallelComm {
  std::function<void(float* data, size_t n)> all_reduce_sum;
  std::function<void(float* data, size_t n)> all_reduce_max;
  // Concatenates each rank's `n_local` floats in rank order into `gathered`.
  std::function<void(const float* local, float* gathered, size_t n_local)> all_gather;
};

// Expert parallelism (ShardSpec::ep_size > 1): the ranks of an expert group
// each hold experts / size of every sparse layer's experts, and a sparse
// layer's rows travel to their experts' ranks and back (model_moe.cc) by a
// variable all-to-all over the group: `send` holds send_counts[p] floats for
// each rank p back to back, `recv` receives recv_counts[p] from each. Every
// rank of the group makes the same calls in the same order. Pointers are in
// the backend's memory, as TensorParallelComm's.
struct ExpertParallelComm {
  int size = 1;
  int rank = 0;
  std::function<void(const float* send, const std::vector<size_t>& send_counts, float* recv,
                     const std::vector<size_t>& recv_counts)>
      all_to_all_v;
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
