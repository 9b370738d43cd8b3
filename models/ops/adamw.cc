// CPU AdamW and gradient-norm helpers.
#include "models/ops/adamw.h"

#include <cmath>

namespace cohort::models {

float clip_coefficient(double global_norm, float max_norm) {
  if (max_norm <= 0) return 1.0f;
  const double coef = max_norm / (global_norm + 1e-6);
  return coef < 1.0 ? static_cast<float>(coef) : 1.0f;
}

}  // namespace cohort::models

namespace cohort::models::cpu {

void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                  const AdamWConfig& c, int64_t step, bool decay) {
  const float bc1 = 1.0f - std::pow(c.beta1, static_cast<float>(step));
  const float bc2 = 1.0f - std::pow(c.beta2, static_cast<float>(step));
  const float decay_factor = decay ? 1.0f - c.lr * c.weight_decay : 1.0f;
  for (size_t i = 0; i < n; ++i) {
    const float g = grads[i];
    m[i] = c.beta1 * m[i] + (1.0f - c.beta1) * g;
    v[i] = c.beta2 * v[i] + (1.0f - c.beta2) * g * g;
    const float mhat = m[i] / bc1;
    const float vhat = v[i] / bc2;
    params[i] = params[i] * decay_factor - c.lr * mhat / (std::sqrt(vhat) + c.eps);
  }
}

double sum_of_squares(const float* x, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

void scale(float* x, size_t n, float factor) {
  for (size_t i = 0; i < n; ++i) x[i] *= factor;
}

}  // namespace cohort::models::cpu
