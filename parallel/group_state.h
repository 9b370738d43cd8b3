// Private to parallel/: what DataParallel keeps per parameter group.
#pragma once

#include <memory>
#include <vector>

#include "collective/communicator.h"
#include "parallel/data_parallel.h"

namespace cohort::parallel {

// A contiguous range of a group's floats sharded over one communicator.
// A group is one part, over the data-parallel axis; under expert
// parallelism a sparse layer's group is two: its dense parameters over
// the data-parallel axis, and its experts (which close the group, and
// differ between the ranks of an expert group) over the ranks holding the
// same experts, the expert replicas.
struct DataParallel::Part {
  size_t begin = 0;                // its first float in the group buffer
  int first_param = 0;             // its first parameter in the group's list
  models::ParamGroup spec;         // its parameters, offsets from `begin`
  ShardLayout layout;
  collective::Communicator* comm = nullptr;
  int rank = 0;                    // this rank's shard in `layout` (0 under DDP)
  size_t shard_base = 0;           // where its shard starts in the group's owned shard
  bool experts = false;
  // Collectives in flight and their buffers.
  std::shared_ptr<collective::Work> pending_gather;
  float* gather_target = nullptr;
  void* gather_half = nullptr;
  float* reduce_source = nullptr;  // packed gradients (fsdp2) for reduce-scatter
  float* reduce_target = nullptr;  // reduce-scatter output, added into the owned gradients

  size_t numel() const { return spec.numel; }
  size_t shard_numel() const { return layout.shard_numel(); }
  // Floats a buffer needs to hold the part from its start: the gathered
  // padding of a flat layout, or exactly the part.
  size_t extent() const { return layout.is_flat() ? layout.padded_numel() : layout.full_numel(); }
};

struct DataParallel::GroupState {
  int index = 0;
  const models::ParamGroup* spec = nullptr;
  std::vector<Part> parts;
  // This rank's shard of the group: its parts' shards back to back
  // (the whole group under DDP), as checkpoints store it.
  size_t owned_numel = 0;
  std::vector<ShardSegment> owned_segments;  // offsets in the group and in that shard
  // Floats of a buffer holding the whole group: numel, and a single flat
  // part's padding.
  size_t full_extent = 0;
  // Full parameters in group layout. Persistent for ddp/zero1/zero2; for
  // zero3/fsdp2 a pool buffer while gathered, else null.
  float* full_params = nullptr;
  float* current_params = nullptr;  // what the model reads now
  // zero3/fsdp2: the owned shard of parameters (persistent), and with a
  // half param_dtype its copy rounded to it. Null for the other strategies,
  // whose owned shard is a view into full_params (part_params).
  float* shard_params = nullptr;
  void* shard_half = nullptr;
  // ddp/zero1/zero2 under a 16-bit matmul precision: the working copy of
  // full_params (persistent, registered with the backend), or null.
  void* working = nullptr;
  // Full gradients: persistent for ddp/zero1, a zeroed pool buffer during a
  // group's backward for zero2/zero3/fsdp2.
  float* full_grads = nullptr;
  // zero2/zero3/fsdp2: the owned shard of gradients (persistent); a view
  // into full_grads otherwise (part_grads).
  float* shard_grads = nullptr;
  float* m = nullptr;  // AdamW moments of the owned shard (owned_numel floats)
  float* v = nullptr;
  std::vector<std::shared_ptr<collective::Work>> pending_reduce;
  bool gathered = false;
  std::vector<float*> persistent;  // freed with the engine

  // A group with nothing to train (LoRA's embedding and head): no buffers,
  // no collectives.
  bool empty() const { return spec->numel == 0; }
  // One part over the whole group: gathers land in place.
  bool single() const { return parts.size() == 1; }

  float* keep(models::Backend& backend, size_t numel);
};

}  // namespace cohort::parallel
