// LossScaler: dynamic loss scaling for fp16 mixed precision.
//
// fp16 GEMM operands underflow to zero below ~6e-8 and overflow to infinity
// above 65504. The loss (so every gradient) is multiplied by scale() before
// backward so that small gradients stay representable; the optimizer step
// divides it out again. When a step's gradients come back non-finite the
// scale was too large: the step is skipped and the scale multiplied by
// backoff. After growth_interval finite steps in a row it is multiplied by
// growth, to win back range. The same policy as torch.amp.GradScaler.
//
// The state (scale and the finite-step count) is part of a checkpoint, so a
// resumed run skips and grows exactly as an uninterrupted one.
#pragma once

#include <cstdint>

#include "base/status.h"

namespace cohort::models {

struct LossScalerOptions {
  double initial_scale = 65536.0;
  int64_t growth_interval = 2000;
  double growth = 2.0;
  double backoff = 0.5;
  double min_scale = 1.0 / 65536;  // never shrink below (a scale of 0 would hide every gradient)
  double max_scale = 1.0e30;       // float's range with room to multiply gradients
};

struct LossScalerState {
  double scale = 65536.0;
  int64_t finite_steps = 0;  // finite steps since the last change
};

class LossScaler {
 public:
  static Result<LossScaler> create(const LossScalerOptions& options);

  double scale() const { return state_.scale; }
  // Records whether this step's gradients were all finite and adjusts the
  // scale; returns true when the optimizer step should be applied.
  bool update(bool gradients_finite);

  const LossScalerState& state() const { return state_; }
  Status restore(const LossScalerState& state);

 private:
  explicit LossScaler(const LossScalerOptions& options);
  LossScalerOptions options_;
  LossScalerState state_;
};

}  // namespace cohort::models
