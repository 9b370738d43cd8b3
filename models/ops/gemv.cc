// CPU references of the decode engine's small-batch projections (gemv.h).
#include "models/ops/gemv.h"

#include <cmath>
#include <cstddef>

#include "base/half_float.h"

namespace cohort::models::cpu {
namespace {

float dot_bf16(const Bf16Bits* a, const Bf16Bits* b, int in) {
  float sum = 0;
  for (int k = 0; k < in; ++k) sum += bf16_bits_to_float(a[k]) * bf16_bits_to_float(b[k]);
  return sum;
}

}  // namespace

void gemv_bf16(float* y, const Bf16Bits* x, const Bf16Bits* w, int n, int in, int out) {
  for (int r = 0; r < n; ++r) {
    for (int o = 0; o < out; ++o) {
      y[static_cast<size_t>(r) * out + o] =
          dot_bf16(x + static_cast<size_t>(r) * in, w + static_cast<size_t>(o) * in, in);
    }
  }
}

void gemv_swiglu_bf16(Bf16Bits* h, const Bf16Bits* x, const Bf16Bits* w, int n, int in,
                      int intermediate) {
  const size_t I = static_cast<size_t>(intermediate);
  for (int r = 0; r < n; ++r) {
    const Bf16Bits* xr = x + static_cast<size_t>(r) * in;
    for (size_t i = 0; i < I; ++i) {
      const float g = dot_bf16(xr, w + i * in, in);
      const float u = dot_bf16(xr, w + (I + i) * in, in);
      h[r * I + i] = float_to_bf16_bits(g / (1.0f + std::exp(-g)) * u);
    }
  }
}

}  // namespace cohort::models::cpu
