// FP8 e4m3 weights: block-scaled (transformers' FineGrainedFP8, 128 x 128
// tiles), per-tensor and per-channel. Quantization follows transformers'
// FineGrainedFP8HfQuantizer.create_quantized_param
// (src/transformers/quantizers/quantizer_finegrained_fp8.py): per tile
// scale = 448 / amax, q = e4m3(clamp(w * scale, -448, 448)), and the stored
// weight_scale_inv is 1 / scale, multiplied back at dequantization. Edge
// tiles of a shape that 128 does not divide keep their own scale, as the
// ceil-divided weight_scale_inv grid of transformers' FP8Linear holds them
// (its on-the-fly quantizer refuses such shapes; cohort makes them).
#include <algorithm>
#include <cmath>

#include "models/quant/formats.h"

#include "base/parallel_for.h"
#include "models/quant/fp8_e4m3.h"

namespace cohort::models::quant::detail {

Status validate_fp8(const QuantizedWeight& w) {
  COHORT_RETURN_IF_ERROR(
      expect_count(w, "the e4m3 weight", w.packed.size(), size_t(w.rows * w.cols)));
  size_t scales = 1;
  if (w.format == WeightFormat::kFp8Channel) scales = size_t(w.rows);
  if (w.format == WeightFormat::kFp8Block) {
    if (w.block_rows <= 0 || w.block_cols <= 0) {
      return weight_error(w, "the block size " + std::to_string(w.block_rows) + "x" +
                                 std::to_string(w.block_cols) +
                                 " must be positive (quantization_config.weight_block_size)");
    }
    scales = size_t(ceil_div(w.rows, w.block_rows) * ceil_div(w.cols, w.block_cols));
  }
  return expect_count(w, "the scales (weight_scale_inv / weight_scale)", w.scales.size(), scales);
}

void dequantize_fp8_rows(const PackedWeightView& w, int64_t row_begin, int64_t row_end,
                         float* out) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const uint8_t* q = w.packed + r * w.cols;
    float* dst = out + (r - row_begin) * w.cols;
    for (int64_t c = 0; c < w.cols; ++c) dst[c] = e4m3_to_float(q[c]) * fp8_scale_at(w, r, c);
  }
}

Result<QuantizedWeight> quantize_fp8_block(const std::string& name, const float* x, int64_t rows,
                                           int64_t cols, int64_t block_rows, int64_t block_cols) {
  QuantizedWeight w;
  w.format = WeightFormat::kFp8Block;
  w.name = name;
  w.rows = rows, w.cols = cols, w.bits = 8;
  w.block_rows = block_rows, w.block_cols = block_cols;
  if (block_rows <= 0 || block_cols <= 0)
    return weight_error(w, "the FP8 block size must be positive");
  const int64_t tile_rows = ceil_div(rows, block_rows), tile_cols = ceil_div(cols, block_cols);
  w.packed.resize(size_t(rows * cols));
  w.scales.resize(size_t(tile_rows * tile_cols));
  // Tile rows are independent: a large weight spreads over the cores.
  parallel_for(size_t(tile_rows), [&](size_t tile_row) {
    const int64_t tr = int64_t(tile_row);
    for (int64_t tc = 0; tc < tile_cols; ++tc) {
      const int64_t r0 = tr * block_rows, r1 = std::min(rows, r0 + block_rows);
      const int64_t c0 = tc * block_cols, c1 = std::min(cols, c0 + block_cols);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
      // An all-zero tile would make transformers' scale infinite and its
      // values NaN; cohort stores zeros with a unit scale.
      const float scale = amax > 0.0f ? kE4m3Max / amax : 1.0f;
      for (int64_t r = r0; r < r1; ++r) {
        // Local pointers: a byte store may alias anything reached through
        // the captures, which the loop would otherwise read again each time.
        const float* in = x + r * cols;
        uint8_t* out = w.packed.data() + r * cols;
        for (int64_t c = c0; c < c1; ++c) out[c] = float_to_e4m3(std::clamp(in[c] * scale, -kE4m3Max, kE4m3Max));
      }
      w.scales[tr * tile_cols + tc] = 1.0f / scale;
    }
  }, rows * cols >= (int64_t(1) << 20) ? 0 : 1);
  return w;
}

}  // namespace cohort::models::quant::detail
