// The CPU reference projection: W dequantized a block of rows at a time
// (dequantize_view_rows), dot products with every x row summed in double.
#include "models/quant/quantized_projection.h"

#include <algorithm>
#include <vector>

#include "base/half_float.h"

namespace cohort::models::quant {
namespace {

bool is_row_dtype(DType d) {
  return d == DType::kF32 || d == DType::kBF16;
}

float load(const void* base, DType dtype, int64_t i) {
  return dtype == DType::kF32 ? static_cast<const float*>(base)[i]
                              : bf16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
}

void store(void* base, DType dtype, int64_t i, double value) {
  if (dtype == DType::kF32)
    static_cast<float*>(base)[i] = static_cast<float>(value);
  else
    static_cast<uint16_t*>(base)[i] = float_to_bf16_bits(static_cast<float>(value));
}

class CpuQuantizedProjection final : public QuantizedProjection {
 public:
  const char* name() const override { return "cpu reference"; }

  Status supports(const PackedWeightView& w, const ProjectionArgs& a) const override {
    if (!is_row_dtype(a.x_dtype) || !is_row_dtype(a.y_dtype)) {
      return invalid_argument(
          std::string("quantized projection: x and y must be f32 or bf16, got ") +
          dtype_name(a.x_dtype) + " and " + dtype_name(a.y_dtype));
    }
    if (a.rows <= 0 || !a.x || !a.y)
      return invalid_argument("quantized projection: no rows, x or y");
    const bool has_scales = w.format == WeightFormat::kNf4
                                ? w.nf4_absmax_codes && w.nf4_absmax_scales
                                : w.scales != nullptr;
    if (w.rows <= 0 || w.cols <= 0 || !w.packed || !has_scales) {
      return invalid_argument(std::string("quantized projection: an empty ") + to_string(w.format) +
                              " weight");
    }
    return Status::ok();
  }

  Status project(const PackedWeightView& w, const ProjectionArgs& a) override {
    COHORT_RETURN_IF_ERROR(supports(w, a));
    // About 1M dequantized values at a time, whatever the weight's size.
    const int64_t block = std::max<int64_t>(1, (int64_t{1} << 20) / w.cols);
    std::vector<float> x(static_cast<size_t>(a.rows * w.cols));
    for (int64_t i = 0; i < a.rows * w.cols; ++i) x[size_t(i)] = load(a.x, a.x_dtype, i);
    for (int64_t n0 = 0; n0 < w.rows; n0 += block) {
      const int64_t n1 = std::min(w.rows, n0 + block);
      scratch_.resize(
          static_cast<size_t>(std::max<int64_t>(int64_t(scratch_.size()), (n1 - n0) * w.cols)));
      dequantize_view_rows(w, n0, n1, scratch_.data());
      for (int64_t i = 0; i < a.rows; ++i) {
        const float* xi = x.data() + i * w.cols;
        for (int64_t n = n0; n < n1; ++n) {
          const float* wn = scratch_.data() + (n - n0) * w.cols;
          double sum = a.bias ? a.bias[n] : 0.0;
          for (int64_t k = 0; k < w.cols; ++k) sum += double(xi[k]) * double(wn[k]);
          store(a.y, a.y_dtype, i * w.rows + n, sum);
        }
      }
    }
    return Status::ok();
  }

 private:
  std::vector<float> scratch_;
};

}  // namespace

std::unique_ptr<QuantizedProjection> make_cpu_quantized_projection() {
  return std::make_unique<CpuQuantizedProjection>();
}

}  // namespace cohort::models::quant
