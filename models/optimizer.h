// AdamW over the model's flat buffers.
//
// adamw_update_range() is the building block for sharded optimizers: it steps
// elements [begin, end) of one parameter group, whatever slice of the group a
// ZeRO/FSDP rank owns, applying weight decay only to the parameters the layout
// marks (matrices, not norms or biases). `params`, `grads`, `m`, `v` point at
// element `begin` of their buffers (backend memory).
//
// AdamW is the unsharded optimizer: fp32 moments for every group of what it
// trains (a Model's weights, or the LoRA adapters on a frozen one: a
// TrainableParams), allocated once, and clip_grad_norm over all local
// gradients. Under tensor
// parallelism the norm it computes is this rank's only; parallel/ combines
// ranks (counting replicated parameters once).
#pragma once

#include <vector>

#include "models/model.h"
#include "models/ops/adamw.h"

namespace cohort::models {

void adamw_update_range(Backend& backend, const ParamGroup& group, size_t begin, size_t end,
                        float* params, const float* grads, float* m, float* v,
                        const AdamWConfig& config, int64_t step);

class AdamW {
 public:
  AdamW(TrainableParams& params, Backend& backend, const AdamWConfig& config);
  AdamW(Model& model, const AdamWConfig& config) : AdamW(model, model.backend(), config) {}
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  void set_lr(float lr) { config_.lr = lr; }
  const AdamWConfig& config() const { return config_; }
  // L2 norm of all gradients of the model.
  double grad_norm() const;
  // Scales gradients so their norm is at most max_norm; returns the norm
  // before clipping (as torch.nn.utils.clip_grad_norm_).
  double clip_grad_norm(float max_norm);
  void step();
  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t step) { step_ = step; }
  // Moments of group g (backend memory, same layout as the params).
  float* first_moment(int g) const { return m_[g]; }
  float* second_moment(int g) const { return v_[g]; }

 private:
  TrainableParams& params_;
  Backend& backend_;
  AdamWConfig config_;
  int64_t step_ = 0;
  std::vector<float*> m_, v_;
};

}  // namespace cohort::models
