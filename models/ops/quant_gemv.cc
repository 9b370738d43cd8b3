// CPU references of the quantized decode projections (quant_gemv.h).
#include "models/ops/quant_gemv.h"

#include <cmath>
#include <vector>

#include "base/half_float.h"

namespace cohort::models::cpu {
namespace {

// y [n, rows] = x [n, cols] · Wᵀ, W dequantized, sums in double.
std::vector<float> project(const Bf16Bits* x, const quant::RowPackedWeight& w, int n) {
  std::vector<float> weight(size_t(w.rows * w.cols)), y(size_t(n * w.rows));
  quant::dequantize(w, weight.data());
  for (int r = 0; r < n; ++r) {
    for (int64_t o = 0; o < w.rows; ++o) {
      double sum = 0;
      for (int64_t k = 0; k < w.cols; ++k)
        sum += double(bf16_bits_to_float(x[r * w.cols + k])) * weight[size_t(o * w.cols + k)];
      y[size_t(r * w.rows + o)] = float(sum);
    }
  }
  return y;
}

}  // namespace

void quant_gemv(float* y, const Bf16Bits* x, const quant::RowPackedWeight& w, int n) {
  const std::vector<float> out = project(x, w, n);
  for (size_t i = 0; i < out.size(); ++i) y[i] = out[i];
}

void quant_gemv_swiglu(Bf16Bits* h, const Bf16Bits* x, const quant::RowPackedWeight& w, int n) {
  const std::vector<float> gate_up = project(x, w, n);
  const int64_t I = w.rows / 2;
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < I; ++i) {
      const float g = gate_up[size_t(r * w.rows + i)], u = gate_up[size_t(r * w.rows + I + i)];
      h[r * I + i] = float_to_bf16_bits(g / (1.0f + std::exp(-g)) * u);
    }
  }
}

}  // namespace cohort::models::cpu
