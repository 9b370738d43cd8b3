// The learning-rate schedule of the trainer: linear warm-up to lr over
// warmup_steps, then a cosine from lr down to min_lr at the last step.
#pragma once

#include <cmath>

namespace cohort::train {

// `step` counts optimizer steps from 0.
inline double learning_rate(int step, int total_steps, int warmup_steps, double lr, double min_lr) {
  if (warmup_steps > 0 && step < warmup_steps) return lr * double(step + 1) / double(warmup_steps);
  int decay_steps = total_steps - warmup_steps;
  if (decay_steps <= 1) return lr;
  double progress = double(step - warmup_steps) / double(decay_steps - 1);
  if (progress > 1) progress = 1;
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace cohort::train
