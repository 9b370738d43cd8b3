// CPU SwiGLU and residual add.
#include "models/ops/swiglu.h"

#include <cmath>

namespace cohort::models::cpu {

void swiglu_forward(float* h, const float* g, const float* u, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float sig = 1.0f / (1.0f + std::exp(-g[i]));
    h[i] = g[i] * sig * u[i];
  }
}

// d silu(g)/dg = sig * (1 + g * (1 - sig)).
void swiglu_backward(float* dg, float* du, const float* dh, const float* g, const float* u,
                     size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float sig = 1.0f / (1.0f + std::exp(-g[i]));
    const float silu = g[i] * sig;
    dg[i] += dh[i] * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
    du[i] += dh[i] * silu;
  }
}

void residual_forward(float* out, const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void swiglu_fused(float* h, const float* gate_up, int n, int intermediate) {
  const size_t I = static_cast<size_t>(intermediate);
  for (int r = 0; r < n; ++r) {
    const float* g = gate_up + r * 2 * I;
    swiglu_forward(h + r * I, g, g + I, I);
  }
}

}  // namespace cohort::models::cpu
