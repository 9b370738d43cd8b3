// The two int4 checkpoint packings cohort reads, GPTQ and AWQ (layouts in
// quantized_weight.h). Both keep W transposed, [in, out], with several
// values in each int32 word: GPTQ packs along `in` in plain bit order
// (AutoGPTQ's QuantLinear.pack, auto_gptq/nn_modules/qlinear/
// qlinear_cuda_old.py), AWQ along `out` in its interleaved nibble order
// (AutoAWQ's WQLinear_GEMM.from_linear, awq/modules/linear/gemm.py; read
// back by awq/utils/packing_utils.py's unpack_awq + reverse_awq_order).
#include "models/quant/formats.h"

namespace cohort::models::quant::detail {
namespace {

// The packed value in bits [bits * slot, +bits) of a word.
inline int32_t field(uint32_t word, int bits, int64_t slot) {
  return static_cast<int32_t>((word >> (bits * slot)) & ((1u << bits) - 1));
}

}  // namespace

Status validate_gptq(const QuantizedWeight& w) {
  if (w.bits != 4 && w.bits != 8) {
    return weight_error(w, std::to_string(w.bits) + "-bit GPTQ is not supported (4 and 8 are)");
  }
  const int64_t per_word = 32 / w.bits;
  if (w.cols % per_word != 0 || w.rows % per_word != 0) {
    return weight_error(w,
                        "GPTQ packs " + std::to_string(per_word) +
                            " values a word: in_features and out_features must be multiples of it");
  }
  if (w.group_size <= 0) return weight_error(w, "the GPTQ group size must be positive");
  const int64_t groups = ceil_div(w.cols, w.group_size);
  COHORT_RETURN_IF_ERROR(
      expect_count(w, "qweight (bytes)", w.packed.size(), size_t(w.cols / per_word * w.rows * 4)));
  COHORT_RETURN_IF_ERROR(
      expect_count(w, "qzeros (bytes)", w.zeros.size(), size_t(groups * (w.rows / per_word) * 4)));
  COHORT_RETURN_IF_ERROR(expect_count(w, "scales", w.scales.size(), size_t(groups * w.rows)));
  if (!w.g_idx.empty()) {
    COHORT_RETURN_IF_ERROR(expect_count(w, "g_idx", w.g_idx.size(), size_t(w.cols)));
    for (size_t k = 0; k < w.g_idx.size(); ++k) {
      if (w.g_idx[k] < 0 || w.g_idx[k] >= groups) {
        return weight_error(w, "g_idx[" + std::to_string(k) + "] = " + std::to_string(w.g_idx[k]) +
                                   " names no group (there are " + std::to_string(groups) + ")");
      }
    }
  }
  return Status::ok();
}

void dequantize_gptq_rows(const PackedWeightView& w, int64_t row_begin, int64_t row_end,
                          float* out) {
  const int64_t per_word = 32 / w.bits;
  const int64_t zero_words_per_group = w.rows / per_word;
  // k outside, n inside: qweight's words for one k are contiguous along n.
  for (int64_t k = 0; k < w.cols; ++k) {
    const int64_t g = w.g_idx ? w.g_idx[k] : k / w.group_size;
    for (int64_t n = row_begin; n < row_end; ++n) {
      const int32_t q =
          field(word_at(w.packed, size_t((k / per_word) * w.rows + n)), w.bits, k % per_word);
      const int32_t z = field(word_at(w.zeros, size_t(g * zero_words_per_group + n / per_word)),
                              w.bits, n % per_word) +
                        w.gptq_zero_offset;
      out[(n - row_begin) * w.cols + k] = w.scales[g * w.rows + n] * static_cast<float>(q - z);
    }
  }
}

// AWQ's column order inside a word: nibble i holds column {0,2,4,6,1,3,5,7}[i]
// of the word's eight, so column j sits in nibble {0,4,1,5,2,6,3,7}[j].
constexpr int kAwqNibbleOfColumn[8] = {0, 4, 1, 5, 2, 6, 3, 7};

Status validate_awq(const QuantizedWeight& w) {
  if (w.bits != 4)
    return weight_error(w, std::to_string(w.bits) + "-bit AWQ is not supported (4 is)");
  if (w.rows % 8 != 0)
    return weight_error(w,
                        "AWQ packs 8 output columns a word: out_features must be a multiple of 8");
  if (w.group_size <= 0 || w.cols % w.group_size != 0) {
    return weight_error(w, "the AWQ group size " + std::to_string(w.group_size) +
                               " does not divide in_features " + std::to_string(w.cols));
  }
  const int64_t groups = w.cols / w.group_size, words_per_row = w.rows / 8;
  COHORT_RETURN_IF_ERROR(
      expect_count(w, "qweight (bytes)", w.packed.size(), size_t(w.cols * words_per_row * 4)));
  COHORT_RETURN_IF_ERROR(
      expect_count(w, "qzeros (bytes)", w.zeros.size(), size_t(groups * words_per_row * 4)));
  return expect_count(w, "scales", w.scales.size(), size_t(groups * w.rows));
}

void dequantize_awq_rows(const PackedWeightView& w, int64_t row_begin, int64_t row_end,
                         float* out) {
  const int64_t words_per_row = w.rows / 8;
  for (int64_t k = 0; k < w.cols; ++k) {
    const int64_t g = k / w.group_size;
    for (int64_t n = row_begin; n < row_end; ++n) {
      const int nibble = kAwqNibbleOfColumn[n % 8];
      const int32_t q = field(word_at(w.packed, size_t(k * words_per_row + n / 8)), 4, nibble);
      const int32_t z = field(word_at(w.zeros, size_t(g * words_per_row + n / 8)), 4, nibble);
      out[(n - row_begin) * w.cols + k] = static_cast<float>(q - z) * w.scales[g * w.rows + n];
    }
  }
}

}  // namespace cohort::models::quant::detail
