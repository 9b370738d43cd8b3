// CPU linear via cblas_sgemm (row-major).
#include "models/ops/linear.h"

#include <cblas.h>

#include <cstddef>

namespace cohort::models::cpu {

void linear_forward(float* y, const float* x, const float* w, const float* b, int n, int in,
                    int out) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in, 0.0f, y,
              out);
  if (!b) return;
  for (int i = 0; i < n; ++i) {
    float* yi = y + static_cast<size_t>(i) * out;
    for (int j = 0; j < out; ++j) yi[j] += b[j];
  }
}

void linear_backward(float* dx, float* dw, float* db, const float* dy, const float* x,
                     const float* w, int n, int in, int out) {
  if (dx) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, dy, out, w, in, 1.0f,
                dx, in);
  }
  if (dw) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, 1.0f, dy, out, x, in, 1.0f, dw,
                in);
  }
  if (!db) return;
  for (int i = 0; i < n; ++i) {
    const float* dyi = dy + static_cast<size_t>(i) * out;
    for (int j = 0; j < out; ++j) db[j] += dyi[j];
  }
}

}  // namespace cohort::models::cpu
