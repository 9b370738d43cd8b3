// TrainableParams: the flat parameter groups an optimizer updates and
// parallel/ shards, gathers and reduces (param_layout.h), whoever owns them:
// a Model's own weights (full training), or the LoRA adapters on a frozen
// Model (lora.h). Groups are numbered as the model's hooks number them
// (ModelHooks: embedding 0, block i at 1 + i, the head last); a group with
// nothing to train there has no parameters.
//
// Buffers are backend memory. set_group_buffers redirects a group's
// parameters and gradients (a gathered FSDP buffer, a pool buffer, null
// while sharded away); release_own_buffers frees what the owner allocated
// once every group points elsewhere. One thread at a time.
#pragma once

#include "models/param_layout.h"

namespace cohort::models {

class TrainableParams {
 public:
  virtual ~TrainableParams() = default;
  virtual const ParamLayout& layout() const = 0;
  virtual float* params(int group) const = 0;
  virtual float* grads(int group) const = 0;
  virtual void set_group_buffers(int group, float* params, float* grads) = 0;
  virtual void release_own_buffers() = 0;
  int num_groups() const { return static_cast<int>(layout().groups.size()); }
};

}  // namespace cohort::models
