// Private to parallel/: what DataParallel keeps per parameter group.
#pragma once

#include <memory>
#include <vector>

#include "collective/communicator.h"
#include "parallel/data_parallel.h"

namespace cohort::parallel {

struct DataParallel::GroupState {
  int index = 0;
  const models::ParamGroup* spec = nullptr;
  ShardLayout layout;
  // Full parameters in group layout (padded for flat layouts). Persistent for
  // ddp/zero1/zero2; for zero3/fsdp2 a pool buffer while gathered, else null.
  float* full_params = nullptr;
  float* current_params = nullptr;  // what the model reads now
  // The owned shard of parameters: a view into full_params (ddp/zero1/zero2)
  // or its own persistent buffer (zero3/fsdp2).
  float* shard_params = nullptr;
  // zero3/fsdp2 with a half param_dtype: the owned shard rounded to it
  // (persistent), and the half gather target while a gather is in flight.
  void* shard_half = nullptr;
  void* gather_half = nullptr;
  // ddp/zero1/zero2 under a 16-bit matmul precision: the working copy of
  // full_params (persistent, registered with the backend), or null.
  void* working = nullptr;
  // Full gradients: persistent for ddp/zero1, a zeroed pool buffer during a
  // group's backward for zero2/zero3/fsdp2.
  float* full_grads = nullptr;
  float* shard_grads = nullptr;  // owned shard: a view (ddp/zero1) or persistent
  float* m = nullptr;            // AdamW moments of the owned shard
  float* v = nullptr;
  // Reductions in flight and the buffers they use.
  std::vector<std::shared_ptr<collective::Work>> pending_reduce;
  float* reduce_source = nullptr;  // packed gradients (fsdp2) for reduce-scatter
  float* reduce_target = nullptr;  // reduce-scatter output, added into shard_grads
  // A gather in flight.
  std::shared_ptr<collective::Work> pending_gather;
  float* gather_target = nullptr;
  bool gathered = false;
  std::vector<float*> persistent;  // freed with the engine
  // Expert parallelism: the floats [expert_begin, expert_end) of the group
  // are this rank's experts (ParamSpec::expert_parallel, which close a
  // sparse layer's group); empty otherwise.
  size_t expert_begin = 0, expert_end = 0;

  // A group with nothing to train (LoRA's embedding and head): no buffers,
  // no collectives.
  bool empty() const { return spec->numel == 0; }

  float* keep(models::Backend& backend, size_t numel);
};

}  // namespace cohort::parallel
