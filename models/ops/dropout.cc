// CPU dropout (dropout.h).
#include "models/ops/dropout.h"

#include <cstddef>

namespace cohort::models::cpu {

void dropout_forward(float* out, const float* x, int rows, int cols, const DropoutMask& mask) {
  const float kept = 1.0f / (1.0f - mask.p);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const size_t i = size_t(r) * cols + c;
      out[i] = dropout_keeps(mask, r, c) ? x[i] * kept : 0.0f;
    }
}

void dropout_backward(float* dx, const float* dout, int rows, int cols, const DropoutMask& mask) {
  const float kept = 1.0f / (1.0f - mask.p);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const size_t i = size_t(r) * cols + c;
      if (dropout_keeps(mask, r, c)) dx[i] += dout[i] * kept;
    }
}

}  // namespace cohort::models::cpu
