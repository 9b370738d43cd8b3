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

#include <cstddef>
#include <functional>

namespace cohort::models {

struct TensorParallelComm {
  std::function<void(float* data, size_t n)> all_reduce_sum;
  std::function<void(float* data, size_t n)> all_reduce_max;
  // Concatenates each rank's `n_local` floats in rank order into `gathered`.
  std::function<void(const float* local, float* gathered, size_t n_local)> all_gather;
};

}  // namespace cohort::models
