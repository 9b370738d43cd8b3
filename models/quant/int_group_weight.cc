// cohort's weight-only int8 and int4 (`[model] quantize = "int8" | "int4"`):
// symmetric round-to-nearest with one fp32 scale per row and group of input
// columns, no zero point, so a decode kernel needs one multiply per group.
// Rows stay row-major along `in`, the order a decode projection reads them.
//
// Error bound: |w - q * scale| <= scale / 2 for every element (plus float
// rounding of the division, below 2^-22 of |w|), scale = absmax / 127 or / 7.
#include <algorithm>
#include <cmath>

#include "models/quant/formats.h"

namespace cohort::models::quant::detail {
namespace {

int largest_level(WeightFormat format) {
  return format == WeightFormat::kInt8 ? 127 : 7;
}

int64_t row_bytes(WeightFormat format, int64_t cols) {
  return format == WeightFormat::kInt8 ? cols : ceil_div(cols, 2);
}

// The signed value at column c of a packed row.
inline int value_at(WeightFormat format, const uint8_t* row, int64_t c) {
  if (format == WeightFormat::kInt8) return static_cast<int8_t>(row[c]);
  const int nibble = (c % 2 == 0) ? (row[c / 2] & 0xf) : (row[c / 2] >> 4);
  return nibble >= 8 ? nibble - 16 : nibble;
}

}  // namespace

Status validate_int_group(const QuantizedWeight& w) {
  const int bits = w.format == WeightFormat::kInt8 ? 8 : 4;
  if (w.bits != bits)
    return weight_error(
        w, "bits is " + std::to_string(w.bits) + ", the format has " + std::to_string(bits));
  if (w.group_size <= 0) return weight_error(w, "the group size must be positive");
  COHORT_RETURN_IF_ERROR(expect_count(w, "the packed values (bytes)", w.packed.size(),
                                      size_t(w.rows * row_bytes(w.format, w.cols))));
  return expect_count(w, "scales", w.scales.size(),
                      size_t(w.rows * ceil_div(w.cols, w.group_size)));
}

void dequantize_int_group_rows(const PackedWeightView& w, int64_t row_begin, int64_t row_end,
                               float* out) {
  const int64_t groups = ceil_div(w.cols, w.group_size), stride = row_bytes(w.format, w.cols);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* row = w.packed + r * stride;
    float* dst = out + (r - row_begin) * w.cols;
    for (int64_t c = 0; c < w.cols; ++c) {
      dst[c] =
          static_cast<float>(value_at(w.format, row, c)) * w.scales[r * groups + c / w.group_size];
    }
  }
}

Result<QuantizedWeight> quantize_int_group(WeightFormat format, const std::string& name,
                                           const float* x, int64_t rows, int64_t cols,
                                           int64_t group_size) {
  QuantizedWeight w;
  w.format = format;
  w.name = name;
  w.rows = rows, w.cols = cols;
  w.bits = format == WeightFormat::kInt8 ? 8 : 4;
  w.group_size = group_size;
  if (group_size <= 0) return weight_error(w, "the group size must be positive");
  const int levels = largest_level(format);
  const int64_t groups = ceil_div(cols, group_size), stride = row_bytes(format, cols);
  w.packed.assign(size_t(rows * stride), 0);
  w.scales.resize(size_t(rows * groups));
  // Rows are independent: a large weight spreads over the cores.
  for_row_chunks(rows, cols, [&](int64_t r_begin, int64_t r_end) {
    for (int64_t r = r_begin; r < r_end; ++r) {
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t c0 = g * group_size, c1 = std::min(cols, c0 + group_size);
        float amax = 0.0f;
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
        const float scale = amax / static_cast<float>(levels);
        w.scales[r * groups + g] = scale;
        for (int64_t c = c0; c < c1; ++c) {
          const int q = scale > 0.0f
                            ? std::clamp(static_cast<int>(std::nearbyint(x[r * cols + c] / scale)),
                                         -levels, levels)
                            : 0;
          uint8_t* byte = w.packed.data() + r * stride + (format == WeightFormat::kInt8 ? c : c / 2);
          if (format == WeightFormat::kInt8)
            *byte = static_cast<uint8_t>(static_cast<int8_t>(q));
          else
            *byte |= static_cast<uint8_t>((q & 0xf) << (c % 2 == 0 ? 0 : 4));
        }
      }
    }
  });
  return w;
}

}  // namespace cohort::models::quant::detail
