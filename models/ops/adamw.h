// AdamW (decoupled weight decay, as torch.optim.AdamW) and the global gradient
// norm with clipping (CPU fp32; CUDA in adamw.cuh).
//
// The optimizer works on flat ranges, so ZeRO-1/2/3 step any slice of a flat
// buffer: params, grads and the two moments are parallel arrays of n floats,
// all fp32 (master weights). `step` counts from 1 for bias correction.
// Whether a range decays is the caller's choice (ParamLayout marks norms and
// biases as not decayed, as is usual for LLM training).
#pragma once

#include <cstddef>
#include <cstdint>

namespace cohort::models {

struct AdamWConfig {
  float lr = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

// The factor grads are multiplied by so that their global norm is at most
// max_norm (1 when already below, or when max_norm <= 0). As torch's
// clip_grad_norm_: max_norm / (norm + 1e-6).
float clip_coefficient(double global_norm, float max_norm);

}  // namespace cohort::models

namespace cohort::models::cpu {

void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                  const AdamWConfig& config, int64_t step, bool decay);
// Sum of squares (in double) of n floats: one rank's share of the global norm.
double sum_of_squares(const float* x, size_t n);
void scale(float* x, size_t n, float factor);

}  // namespace cohort::models::cpu
