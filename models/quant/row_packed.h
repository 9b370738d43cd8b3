// The one layout cohort's CUDA projections read, whatever format a weight
// arrived in (quantized_weight.h): each output row's codes contiguous along
// the input, and one scale and one zero point per (row, group of input
// columns):
//
//   W[n, k] = scale[n, g] * (value(code[n, k]) - zero[n, g]),  g = k / group
//
// with value() the code as an unsigned integer (4 or 8 bits), as an e4m3
// number, or as one of NF4's 16 levels. Every format maps onto it exactly:
//   int8, int4 (cohort's, symmetric)  code = q + 128 / q + 8, zero 128 / 8
//   gptq (4 or 8 bits), awq           code = q, zero = the stored zero (+1
//                                     for GPTQ v1 checkpoints), their scale
//   fp8-block / -tensor / -channel    code = the e4m3 byte, zero 0, the
//                                     scale of the element's tile, tensor
//                                     or row
//   nf4                               code = the level's index, zero 0, the
//                                     block's (double-quantized) absmax,
//                                     groups of the 64-value block
// so one kernel family serves them all, reading a weight row as the bf16
// GEMV does (a warp per output row, 16-byte loads along the input). A 4-bit
// row holds two codes a byte, the even column in the low nibble.
//
// Why repack instead of reading the checkpoints' layouts: GPTQ and AWQ keep
// W transposed ([in, out]) with values of one row spread over words of
// other rows; a row-contiguous layout gives the decode GEMV coalesced
// loads and one code path for every format.
//
// Not representable (pack_rows refuses, naming the weight): GPTQ with
// act-order (a column's group is not k / group), NF4 blocks that cross rows,
// groups that are not whole multiples of a 16-byte load of codes (32 columns
// at 4 bits, 16 at 8), and input widths that are not.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "models/quant/quantized_weight.h"

namespace cohort::models::quant {

enum class CodeKind { kUint4, kUint8, kE4m3, kNf4 };
const char* to_string(CodeKind kind);
int code_bits(CodeKind kind);

struct RowPackedWeight {
  CodeKind kind = CodeKind::kUint8;
  int64_t rows = 0, cols = 0;
  int64_t group = 0;           // input columns per scale; the last group may be partial
  std::vector<uint8_t> codes;  // [rows, cols * bits / 8]
  std::vector<float> scales;   // [rows, groups()]
  std::vector<float> zeros;    // [rows, groups()]; empty: every zero is 0 (e4m3)
  std::string format;          // what it came from, for logs: "gptq int4 g128"

  int64_t groups() const { return (cols + group - 1) / group; }
  int64_t row_bytes() const { return cols * code_bits(kind) / 8; }
  size_t bytes() const { return codes.size() + 4 * (scales.size() + zeros.size()); }
};

// The weight in the row layout; errors name the weight and what the layout
// cannot hold.
Result<RowPackedWeight> pack_rows(const QuantizedWeight& weight);

// A RowPackedWeight's buffers borrowed, in host memory or (uploaded by an
// engine or backend) in device memory: what kernels and backends take.
struct RowPackedView {
  CodeKind kind = CodeKind::kUint8;
  int rows = 0, cols = 0, group = 0;
  const uint8_t* codes = nullptr;  // [rows, cols * bits / 8], 16-byte aligned rows
  const float* scales = nullptr;   // [rows, groups]
  const float* zeros = nullptr;    // [rows, groups], or null: all zero
  bool centred = false;            // centred_uint4() of the weight viewed: kernels may skip the zeros
};
RowPackedView view_of(const RowPackedWeight& weight);

// Whether a 4-bit weight's every zero is 8 (cohort's symmetric int4, or a
// symmetric GPTQ checkpoint): W = scale * (code - 8).
bool centred_uint4(const RowPackedWeight& weight);

// Rows of several weights one above the other (q|k|v, gate|up): the same
// code kind, width and group; zeros kept when any part has them.
Result<RowPackedWeight> stack_rows(const std::vector<RowPackedWeight>& parts);

// Rows [row_begin, row_begin + rows) and columns [col_begin, col_begin +
// cols) of a weight: a tensor-parallel rank's cut. Columns must begin on a
// group and end on one or at the row's end (a group is never split), and
// whole 16-byte pieces of codes; otherwise InvalidArgument naming the cut.
Result<RowPackedWeight> slice(const RowPackedWeight& weight, int64_t row_begin, int64_t rows, int64_t col_begin,
                              int64_t cols);

// An e4m3 weight's scales as one per 128 x 128 block, [rows / 128,
// block_stride] row-major with block_stride the blocks along a row rounded
// up to 4 (zeros past the last): what Hopper's block-scaled FP8 GEMM reads
// (models/decode/cuda_tuned_gemm.h). Only where that is the weight exactly:
// e4m3 codes in groups of 128 columns, rows and columns whole blocks, and
// every row of a 128-row block with the same scale in each group (an
// fp8-block checkpoint's tiles, or one scale for the tensor); nullopt
// otherwise (per-channel scales, other codes).
std::optional<std::vector<float>> fp8_block_scales(const RowPackedWeight& weight);

// The reference: W [rows, cols] in fp32, each element one rounding of
// scale * (value - zero) (exact for the integer formats, whose products fit
// float's mantissa), equal to dequantize() of the weight it was packed from.
void dequantize(const RowPackedWeight& weight, float* out);
// The same from a host view.
void dequantize(const RowPackedView& weight, float* out);

}  // namespace cohort::models::quant
