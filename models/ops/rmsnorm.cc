// CPU RMSNorm. Sums run in double so the reference is tighter than any kernel
// it is compared against.
#include "models/ops/rmsnorm.h"

#include <cmath>
#include <cstddef>

namespace cohort::models::cpu {

void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int n, int dim,
                     float eps) {
  for (int i = 0; i < n; ++i) {
    const float* xi = x + static_cast<size_t>(i) * dim;
    float* oi = out + static_cast<size_t>(i) * dim;
    double ss = 0;
    for (int j = 0; j < dim; ++j) ss += static_cast<double>(xi[j]) * xi[j];
    const float r = static_cast<float>(1.0 / std::sqrt(ss / dim + eps));
    for (int j = 0; j < dim; ++j) oi[j] = w[j] * (xi[j] * r);
    if (rstd) rstd[i] = r;
  }
}

// With xhat = x * rstd and g = dout * w:
//   dw += dout * xhat,  dx += rstd * (g - xhat * mean(g * xhat)).
void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                      const float* rstd, int n, int dim) {
  for (int i = 0; i < n; ++i) {
    const float* xi = x + static_cast<size_t>(i) * dim;
    const float* di = dout + static_cast<size_t>(i) * dim;
    float* dxi = dx + static_cast<size_t>(i) * dim;
    const float r = rstd[i];
    double dot = 0;
    for (int j = 0; j < dim; ++j) dot += static_cast<double>(di[j]) * w[j] * xi[j] * r;
    const float mean = static_cast<float>(dot / dim);
    for (int j = 0; j < dim; ++j) {
      const float xhat = xi[j] * r;
      if (dw) dw[j] += di[j] * xhat;  // null: a frozen weight
      dxi[j] += r * (di[j] * w[j] - xhat * mean);
    }
  }
}

}  // namespace cohort::models::cpu
