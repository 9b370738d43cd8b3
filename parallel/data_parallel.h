// DataParallel: one engine for DDP, ZeRO-1/2/3 and FSDP2 over the flat
// parameter groups a model trains (models/trainable_params.h: its own
// weights, or LoRA adapters on its frozen base), on the mesh's
// data-parallel axis.
//
//               params           grads                     optimizer (m, v)
//   ddp         full             full, all-reduced          full
//   zero1       full             full, all-reduced          1/dp (flat shard)
//   zero2       full             1/dp, reduce-scattered     1/dp
//   zero3       1/dp (flat)      1/dp                       1/dp
//   fsdp2       1/dp (per param, dim 0)  1/dp               1/dp
//
// Expert parallelism (mesh.ep() > 1): a sparse layer's experts differ
// between the ranks of an expert group, so its group is two parts. The
// dense parameters follow the table over the data-parallel axis; the
// experts follow it over their replicas (the dp/ep ranks holding the same
// experts): all-reduced there under DDP, sharded 1/(dp/ep) under ZeRO and
// FSDP2.
//
// It plugs into the model through ModelHooks: before a group's forward or
// backward it gathers sharded parameters (and prefetches the next group);
// after a group's backward it starts that group's gradient reduction at once,
// in buckets of bucket_mb for DDP, so communication overlaps the rest of the
// backward pass. Gradient accumulation: DDP and ZeRO-1 reduce only after the
// last micro-step; ZeRO-2/3 and FSDP2 reduce-scatter every micro-step into the
// sharded gradients, since they never keep a full gradient between groups.
//
// Gradients are sums of per-token terms already scaled by 1/(global token
// count) (Model::backward's grad_scale), so reduction is a plain sum and the
// result is the global mean: N ranks give the 1-rank gradients up to
// rounding. Tensor-parallel partial gradients (ParamSpec::tp_partial_grad) are
// summed over the tp group before the data-parallel reduction.
//
// Mixed precision (zero3/fsdp2): with param_dtype bf16 or f16 each rank
// keeps a half copy of its fp32 master shard, refreshed after every update,
// and the all-gathers move half the bytes; gathered parameters are widened
// back to fp32 for the model, so the model computes with the half-rounded
// weights while the optimizer updates the fp32 masters. Gradients are
// reduced in fp32.
//
// Loss scaling: finish_step takes the factor the loss was multiplied by,
// divides it out of the gradients (folded into the clipping factor), and
// skips the update when any gradient is not finite.
//
// On GPU, collectives run on the communicator's stream alongside the model's
// kernels (collective `overlap`): the compute stream waits for a gather on
// the device just before the group needs it, and for reductions only at
// finish_step; the host never blocks on a gather, so kernel launches run
// ahead of communication.
//
// Memory: the persistent buffers are exactly the table above (flat shards of
// ceil(numel / dp) floats per group); gathered parameters and full-size
// gradient scratch are transient, taken from a pool filled during the first
// step and reused after, so a step allocates nothing once warm.
//
// Errors: a collective that fails inside a hook is remembered and returned by
// finish_step(); the step's results are then meaningless. Not thread-safe:
// one training thread drives the model and this engine.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/ops/adamw.h"
#include "parallel/device_mesh.h"
#include "base/parallel_dims.h"
#include "base/strategy.h"
#include "parallel/shard_layout.h"

namespace cohort::parallel {

struct DataParallelOptions {
  Strategy strategy = Strategy::kDdp;
  double bucket_mb = 25.0;            // DDP all-reduce bucket size
  bool reshard_after_forward = true;  // zero3/fsdp2: free gathered params after forward
  bool prefetch = true;               // zero3/fsdp2: gather group g+1 during group g
  void* stream = nullptr;             // the model backend's CUDA stream (nullptr on CPU)
  // zero3/fsdp2: the dtype parameters are all-gathered in (kF32, kBF16 or
  // kF16); the other strategies keep full fp32 parameters and ignore it.
  models::DType param_dtype = models::DType::kF32;
  // ddp/zero1/zero2 with a 16-bit matmul precision: keep a working copy of
  // the full parameters in that type (2 bytes a parameter), rewritten by the
  // fused AdamW step, which the GEMMs read instead of casting the fp32
  // masters on every use.
  bool keep_working_weights = true;
};

struct StepOutcome {
  double grad_norm = 0;  // of the unscaled gradients, before clipping; non-finite when skipped
  bool applied = true;   // false: a gradient was not finite and the update was skipped
};

// Bytes per rank. persistent = params + grads + optimizer; transient buffers
// (gathered parameters, gradient scratch) are reported apart.
struct MemoryReport {
  size_t param_bytes = 0;
  size_t grad_bytes = 0;
  size_t optimizer_bytes = 0;
  size_t transient_bytes = 0;
  size_t persistent_bytes() const { return param_bytes + grad_bytes + optimizer_bytes; }
  std::string to_string() const;
};

class DataParallel {
 public:
  // Takes over the parameter and gradient buffers of what it trains
  // (`trained`: the model's own weights when null, or the LoRA adapters on
  // a frozen model), which must already hold their initial values,
  // identical on every dp rank, and installs its hooks on the model. Groups
  // with nothing to train take no buffers and no collectives. Borrows
  // model, mesh and trained, which must outlive it.
  static Result<std::unique_ptr<DataParallel>> create(models::Model* model, DeviceMesh* mesh,
                                                      const DataParallelOptions& options,
                                                      models::TrainableParams* trained = nullptr);
  ~DataParallel();

  // Before the first micro-step of an optimizer step: how many follow.
  void begin_step(int micro_steps);
  // Before each micro-step's forward (index counts from 0).
  void begin_micro_step(int index);
  // After the last micro-step's backward: completes the gradient reduction,
  // computes the global gradient norm, divides out loss_scale (the factor
  // the loss was multiplied by), clips to grad_clip (≤ 0: no clipping),
  // applies AdamW to the owned shard unless a gradient was not finite, makes
  // the updated parameters available again, and clears the gradients.
  Result<StepOutcome> finish_step(const models::AdamWConfig& adamw, float grad_clip, int64_t step,
                                  double loss_scale = 1.0);

  MemoryReport memory() const;
  Strategy strategy() const { return options_.strategy; }

  // This rank's shard of a group, as checkpoints store it: owned_numel
  // floats (the whole group under DDP) whose segments each hold a piece of
  // one parameter. Under expert parallelism the shard of a sparse layer is
  // its part of the dense parameters, sharded over the data-parallel axis,
  // followed by its part of its own experts, sharded over the ranks that
  // hold the same experts.
  size_t owned_numel(int group) const;
  const std::vector<ShardSegment>& owned_segments(int group) const;

  // Checkpoint access, group by group, in host memory: the owned shard of
  // parameters and of the two AdamW moments (owned_numel floats each).
  Status read_shard(int group, std::vector<float>* params, std::vector<float>* m,
                    std::vector<float>* v);
  Status write_shard(int group, const std::vector<float>& params, const std::vector<float>& m,
                     const std::vector<float>& v);
  // The whole group's fp32 master parameters (this rank's tp slice),
  // gathered over dp.
  Status gather_group(int group, std::vector<float>* params);
  // Gathers every group and keeps it gathered, for generation after
  // training (the model's inference passes run no hooks).
  Status gather_all();

  struct GroupState;
  struct Part;

 private:
  DataParallel(models::Model* model, models::TrainableParams* trained, DeviceMesh* mesh,
               const DataParallelOptions& options);
  Status setup();
  std::vector<Part> make_parts(const models::ParamGroup& spec);
  // A part's piece of the owned shard of parameters or gradients (in the
  // group's full buffer for the strategies that keep one).
  float* part_params(GroupState& s, const Part& part) const;
  float* part_grads(GroupState& s, const Part& part) const;
  // ZeRO-1/2: every rank's updated shards into the full parameters.
  Status gather_full_params(GroupState& s);
  void install_hooks();
  void before_forward(int group);
  void after_forward(int group);
  void before_backward(int group);
  void after_backward(int group);
  void ensure_gathered(int group);
  void start_gather(int group);
  void release_gathered(int group);
  bool half_params() const { return shard_params_ && options_.param_dtype != models::DType::kF32; }
  // The working-copy type, or kF32 when none is kept.
  models::DType working_dtype() const;
  void refresh_working(int group);
  void refresh_half_shards();
  void acquire_grad_scratch(int group);
  void reduce_gradients(int group);
  void sum_tp_partial_grads(int group, float* grads);
  Status wait_reductions();
  void clear_gradients();
  // Squares of this rank's owned gradients, of the dense parameters or of
  // its experts (expert parallelism).
  double owned_sum_of_squares(bool experts);
  Status all_reduce_scalar(collective::Communicator& comm, double* value);
  size_t pool_bytes() const;
  void note(const Status& status);
  float* pool_take(size_t numel);
  void pool_return(float* buffer, size_t numel);

  models::Model* model_;              // runs the passes and calls the hooks
  models::TrainableParams* trained_;  // what is sharded, reduced and updated
  DeviceMesh* mesh_;
  DataParallelOptions options_;
  models::Backend* backend_;
  std::vector<std::unique_ptr<GroupState>> groups_;
  bool shard_optimizer_ = false, shard_grads_ = false, shard_params_ = false;
  int micro_steps_ = 1, micro_index_ = 0;
  bool tied_ = false;
  Status status_;
  struct Pool;
  std::unique_ptr<Pool> pool_;
  float* scalar_ = nullptr;
  // GPU gathers the stream already waits for; checked at the next wait_reductions.
  std::vector<std::shared_ptr<collective::Work>> unsettled_gathers_;
};

}  // namespace cohort::parallel
