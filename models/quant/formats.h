// Private to models/quant: each format's checks, dequantization and (where
// cohort makes the format) quantization, which quantized_weight.cc dispatches
// to. Dequantizers read views of validated weights, over valid row ranges only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "base/parallel_for.h"
#include "models/quant/quantized_weight.h"

namespace cohort::models::quant::detail {

// InvalidArgument "NAME (FORMAT [rows, cols]): what".
Status weight_error(const QuantizedWeight& w, const std::string& what);
// Ok when `buffer` holds `have` elements and the format needs `need`.
Status expect_count(const QuantizedWeight& w, const char* buffer, size_t have, size_t need);

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// body(r0, r1) over the rows [0, rows) of a weight of `cols` columns, in
// chunks of about 256k elements: spread over the cores where the weight
// holds a million elements or more (an 8B model's projections take seconds
// each on one thread), else on this thread. Each chunk writes only its own
// rows, so the result does not depend on the split.
template <typename Body>
void for_row_chunks(int64_t rows, int64_t cols, Body&& body) {
  constexpr int64_t kChunkElements = int64_t(1) << 18;
  const int64_t chunk = std::max<int64_t>(1, kChunkElements / std::max<int64_t>(cols, 1));
  const int64_t chunks = ceil_div(rows, chunk);
  parallel_for(
      size_t(chunks),
      [&](size_t i) {
        const int64_t r0 = int64_t(i) * chunk;
        body(r0, std::min(rows, r0 + chunk));
      },
      rows * cols >= (int64_t(1) << 20) ? 0 : 1);
}

// Little-endian int32 word `i` of a packed buffer, as safetensors stores I32.
inline uint32_t word_at(const uint8_t* bytes, size_t i) {
  uint32_t w;
  std::memcpy(&w, bytes + 4 * i, 4);
  return w;
}

Status validate_fp8(const QuantizedWeight& w);
void dequantize_fp8_rows(const PackedWeightView& w, int64_t row_begin, int64_t row_end, float* out);
// The scale element (r, c) of an e4m3 weight is multiplied by: its tile's,
// its row's or the tensor's. Inline: the dequantizer calls it per element.
inline float fp8_scale_at(const PackedWeightView& w, int64_t r, int64_t c) {
  switch (w.format) {
    case WeightFormat::kFp8Block:
      return w.scales[(r / w.block_rows) * ceil_div(w.cols, w.block_cols) + c / w.block_cols];
    case WeightFormat::kFp8Channel:
      return w.scales[r];
    default:
      return w.scales[0];
  }
}
Result<QuantizedWeight> quantize_fp8_block(const std::string& name, const float* x, int64_t rows,
                                           int64_t cols, int64_t block_rows, int64_t block_cols);

Status validate_gptq(const QuantizedWeight& w);
void dequantize_gptq_rows(const PackedWeightView& w, int64_t row_begin, int64_t row_end,
                          float* out);

Status validate_awq(const QuantizedWeight& w);
void dequantize_awq_rows(const PackedWeightView& w, int64_t row_begin, int64_t row_end, float* out);

Status validate_int_group(const QuantizedWeight& w);
void dequantize_int_group_rows(const PackedWeightView& w, int64_t row_begin, int64_t row_end,
                               float* out);
Result<QuantizedWeight> quantize_int_group(WeightFormat format, const std::string& name,
                                           const float* x, int64_t rows, int64_t cols,
                                           int64_t group_size);

Status validate_nf4(const QuantizedWeight& w);
void dequantize_nf4_rows(const PackedWeightView& w, int64_t row_begin, int64_t row_end, float* out);
// NF4 block b's dequantized absmax (what the dequantizer multiplies each
// level of the block by): the row layout's scale of that block.
float nf4_block_scale(const PackedWeightView& w, int64_t block);
Result<QuantizedWeight> quantize_nf4_weight(const std::string& name, const float* x, int64_t rows,
                                            int64_t cols, int64_t block);

// Error naming the first non-finite element of x [rows, cols], else ok.
Status check_finite(const std::string& name, const float* x, int64_t rows, int64_t cols);

}  // namespace cohort::models::quant::detail
