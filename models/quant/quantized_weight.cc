// The format-independent half of QuantizedWeight: names, shape checks common
// to every format, and dispatch to the per-format files.
#include "models/quant/quantized_weight.h"

#include <cmath>

#include "base/half_float.h"
#include "models/quant/formats.h"

namespace cohort::models::quant {

const char* to_string(WeightFormat format) {
  switch (format) {
    case WeightFormat::kFp8Block:
      return "fp8-block";
    case WeightFormat::kFp8Tensor:
      return "fp8-tensor";
    case WeightFormat::kFp8Channel:
      return "fp8-channel";
    case WeightFormat::kGptq:
      return "gptq";
    case WeightFormat::kAwq:
      return "awq";
    case WeightFormat::kInt8:
      return "int8";
    case WeightFormat::kInt4:
      return "int4";
    case WeightFormat::kNf4:
      return "nf4";
  }
  return "unknown";
}

std::string QuantizedWeight::describe() const {
  const std::string group = " g" + std::to_string(group_size);
  switch (format) {
    case WeightFormat::kFp8Block:
      return "fp8-block " + std::to_string(block_rows) + "x" + std::to_string(block_cols);
    case WeightFormat::kFp8Tensor:
    case WeightFormat::kFp8Channel:
      return to_string(format);
    case WeightFormat::kInt8:
      return "int8" + group;
    case WeightFormat::kGptq: {
      bool act_order = false;  // g_idx other than k / group: desc_act reordered the groups
      for (size_t k = 0; k < g_idx.size() && group_size > 0; ++k)
        act_order |= g_idx[k] != int64_t(k) / group_size;
      return "gptq int" + std::to_string(bits) + group + (act_order ? " act-order" : "") +
             (gptq_zeros == GptqZeros::kStored ? " v2" : "");
    }
    case WeightFormat::kAwq:
      return "awq int4" + group;
    case WeightFormat::kInt4:
      return "int4" + group;
    case WeightFormat::kNf4:
      return "nf4 b" + std::to_string(group_size) + " double-quant";
  }
  return "unknown";
}

size_t QuantizedWeight::stored_bytes() const {
  return packed.size() + scales.size() * sizeof(float) + zeros.size() +
         g_idx.size() * sizeof(int32_t) + nf4_absmax.codes.size() +
         nf4_absmax.scales.size() * sizeof(float);
}

namespace detail {

Status weight_error(const QuantizedWeight& w, const std::string& what) {
  return invalid_argument(w.name + " (" + to_string(w.format) + " [" + std::to_string(w.rows) +
                          ", " + std::to_string(w.cols) + "]): " + what);
}

Status expect_count(const QuantizedWeight& w, const char* buffer, size_t have, size_t need) {
  if (have == need) return Status::ok();
  return weight_error(w, std::string(buffer) + " holds " + std::to_string(have) +
                             " elements where " + std::to_string(need) +
                             " are needed (a truncated or mis-shaped tensor)");
}

Status check_finite(const std::string& name, const float* x, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (!std::isfinite(x[i])) {
      return invalid_argument(name + ": cannot quantize the non-finite value " +
                              std::to_string(x[i]) + " at [" + std::to_string(i / cols) + ", " +
                              std::to_string(i % cols) + "]");
    }
  }
  return Status::ok();
}

}  // namespace detail

// Shapes beyond this are a corrupt header, not a model (the largest open
// models' matrices have about 2^31 elements).
constexpr int64_t kMaxElements = int64_t{1} << 40;

Status validate(const QuantizedWeight& w) {
  if (w.rows <= 0 || w.cols <= 0 || w.rows > kMaxElements / w.cols) {
    return detail::weight_error(w, "the shape must be positive and at most 2^40 elements");
  }
  switch (w.format) {
    case WeightFormat::kFp8Block:
    case WeightFormat::kFp8Tensor:
    case WeightFormat::kFp8Channel:
      return detail::validate_fp8(w);
    case WeightFormat::kGptq:
      return detail::validate_gptq(w);
    case WeightFormat::kAwq:
      return detail::validate_awq(w);
    case WeightFormat::kInt8:
    case WeightFormat::kInt4:
      return detail::validate_int_group(w);
    case WeightFormat::kNf4:
      return detail::validate_nf4(w);
  }
  return detail::weight_error(w, "unknown format");
}

Status dequantize_rows(const QuantizedWeight& w, int64_t row_begin, int64_t row_end, float* out) {
  COHORT_RETURN_IF_ERROR(validate(w));
  if (row_begin < 0 || row_begin > row_end || row_end > w.rows) {
    return detail::weight_error(w, "rows [" + std::to_string(row_begin) + ", " +
                                       std::to_string(row_end) + ") are outside the weight");
  }
  dequantize_view_rows(view_of(w), row_begin, row_end, out);
  return Status::ok();
}

PackedWeightView view_of(const QuantizedWeight& w) {
  PackedWeightView v;
  v.format = w.format;
  v.rows = w.rows, v.cols = w.cols, v.bits = w.bits;
  v.group_size = w.group_size, v.block_rows = w.block_rows, v.block_cols = w.block_cols;
  v.packed = w.packed.data();
  v.scales = w.scales.data();
  v.zeros = w.zeros.empty() ? nullptr : w.zeros.data();
  v.g_idx = w.g_idx.empty() ? nullptr : w.g_idx.data();
  v.gptq_zero_offset = w.gptq_zeros == GptqZeros::kStoredMinusOne ? 1 : 0;
  v.nf4_absmax_codes = w.nf4_absmax.codes.empty() ? nullptr : w.nf4_absmax.codes.data();
  v.nf4_absmax_scales = w.nf4_absmax.scales.empty() ? nullptr : w.nf4_absmax.scales.data();
  v.nf4_absmax_offset = w.nf4_absmax.offset;
  return v;
}

void dequantize_view_rows(const PackedWeightView& w, int64_t row_begin, int64_t row_end,
                          float* out) {
  switch (w.format) {
    case WeightFormat::kFp8Block:
    case WeightFormat::kFp8Tensor:
    case WeightFormat::kFp8Channel:
      detail::dequantize_fp8_rows(w, row_begin, row_end, out);
      break;
    case WeightFormat::kGptq:
      detail::dequantize_gptq_rows(w, row_begin, row_end, out);
      break;
    case WeightFormat::kAwq:
      detail::dequantize_awq_rows(w, row_begin, row_end, out);
      break;
    case WeightFormat::kInt8:
    case WeightFormat::kInt4:
      detail::dequantize_int_group_rows(w, row_begin, row_end, out);
      break;
    case WeightFormat::kNf4:
      detail::dequantize_nf4_rows(w, row_begin, row_end, out);
      break;
  }
}

Status dequantize(const QuantizedWeight& w, float* out) {
  COHORT_RETURN_IF_ERROR(validate(w));
  const PackedWeightView view = view_of(w);
  detail::for_row_chunks(w.rows, w.cols, [&](int64_t r0, int64_t r1) {
    dequantize_view_rows(view, r0, r1, out + r0 * w.cols);
  });
  return Status::ok();
}

Status dequantize_bf16(const QuantizedWeight& w, uint16_t* out) {
  COHORT_RETURN_IF_ERROR(validate(w));
  const PackedWeightView view = view_of(w);
  detail::for_row_chunks(w.rows, w.cols, [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(w.cols));
    for (int64_t r = r0; r < r1; ++r) {
      dequantize_view_rows(view, r, r + 1, row.data());
      for (int64_t c = 0; c < w.cols; ++c) out[r * w.cols + c] = float_to_bf16_bits(row[c]);
    }
  });
  return Status::ok();
}

Result<QuantizedWeight> quantize(WeightFormat format, const std::string& name, const float* x,
                                 int64_t rows, int64_t cols, const QuantizeOptions& options) {
  if (rows <= 0 || cols <= 0 || rows > kMaxElements / cols) {
    return invalid_argument(name + ": cannot quantize a weight of shape [" + std::to_string(rows) +
                            ", " + std::to_string(cols) + "]");
  }
  COHORT_RETURN_IF_ERROR(detail::check_finite(name, x, rows, cols));
  switch (format) {
    case WeightFormat::kFp8Block:
      return detail::quantize_fp8_block(name, x, rows, cols, options.block_rows,
                                        options.block_cols);
    case WeightFormat::kInt8:
    case WeightFormat::kInt4:
      return detail::quantize_int_group(format, name, x, rows, cols, options.group_size);
    case WeightFormat::kNf4:
      return detail::quantize_nf4_weight(name, x, rows, cols, options.nf4_block);
    default:
      break;
  }
  return invalid_argument(
      name + ": cohort reads " + to_string(format) +
      " weights but does not make them; quantize to fp8-block, int8, int4 or nf4");
}

}  // namespace cohort::models::quant
