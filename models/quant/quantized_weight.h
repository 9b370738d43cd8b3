// One quantized-weight description for every format cohort reads or makes:
// a linear layer's weight W [rows = out, cols = in] (Hugging Face's
// orientation) held as packed low-bit values plus the scales (and zero
// points) that turn them back into numbers. The CPU reference here defines
// each format's numbers; GPU kernels (quantized_projection.h) are checked
// against it.
//
// Formats and their layouts (`packed`, `scales`, `zeros` as each stores them):
//
//   kFp8Block     e4m3 [rows, cols]; scales fp32 [ceil(rows/block_rows),
//                 ceil(cols/block_cols)], W = e4m3 * scale of its tile.
//                 transformers' FineGrainedFP8 (`weight_scale_inv`, which
//                 despite the name is multiplied), DeepSeek-V3 and the
//                 Qwen3-*-FP8 releases: 128 x 128 tiles.
//   kFp8Tensor    e4m3 [rows, cols]; one fp32 scale (vLLM's `weight_scale`).
//   kFp8Channel   e4m3 [rows, cols]; one fp32 scale per row (fbgemm / compressed-
//                 tensors' channel strategy, `weight_scale` [rows, 1]).
//   kGptq         AutoGPTQ / gptqmodel / transformers' GPTQ: `qweight` int32
//                 [cols * bits / 32, rows], element (k, n) in bits
//                 [bits * (k % f), +bits) of word (k / f, n), f = 32 / bits;
//                 `qzeros` int32 [groups, rows * bits / 32] packed the same way
//                 along n; `scales` [groups, rows]; `g_idx` [cols] the group of
//                 each input column (act-order permutes it; empty: k / group).
//                 W[n, k] = scale[g, n] * (q - z), g = g_idx[k], where z is the
//                 stored zero + 1 in the "gptq" (v1) checkpoint format, which
//                 stored zero - 1 (AutoGPTQ qlinear_cuda_old's pack and its
//                 `zeros + 1`), and the stored zero in gptqmodel's "gptq_v2".
//   kAwq          AutoAWQ's GEMM packing: `qweight` int32 [cols, rows / 8],
//                 nibble i (bits 4i..4i+3) of word (k, c) holds column
//                 c * 8 + {0,2,4,6,1,3,5,7}[i] (WQLinear_GEMM.from_linear's
//                 order_map; its unpack reads them back with
//                 AWQ_REVERSE_ORDER {0,4,1,5,2,6,3,7}); `qzeros` [cols / group,
//                 rows / 8] packed the same way; `scales` [cols / group, rows].
//                 W[n, k] = (q - z) * scale, g = k / group.
//   kInt8         cohort's weight-only int8: int8 [rows, cols]; scales fp32
//                 [rows, ceil(cols/group)]; symmetric, W = q * scale,
//                 q in [-127, 127], scale = absmax(group) / 127.
//   kInt4         cohort's weight-only int4: two's-complement nibbles, two a
//                 byte along a row (even column in the low nibble), rows of
//                 ceil(cols/2) bytes; scales as kInt8; q in [-7, 7],
//                 scale = absmax(group) / 7.
//   kNf4          QLoRA's NormalFloat4 as bitsandbytes stores it: the
//                 row-major weight flattened into blocks of `group_size` (64)
//                 values, one nibble each, two a byte with the first in the
//                 high nibble; W = kNf4Levels[q] * absmax(block). With double
//                 quantization the block absmax are stored as 8-bit codes of
//                 bitsandbytes' dynamic map in blocks of 256 with one fp32
//                 scale each, around an fp32 offset (their mean): nf4.h.
//
// Products are formed in fp32 (exact for every integer format: a 16-bit
// scale times a small integer fits float's mantissa); the torch fallbacks of
// GPTQ and AWQ round that product to the scales' fp16, cohort keeps it exact.
//
// A QuantizedWeight owns its buffers. `name` is the weight's Hugging Face
// name and every error names it. Functions are pure and thread-safe on a
// const weight.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace cohort::models::quant {

enum class WeightFormat { kFp8Block, kFp8Tensor, kFp8Channel, kGptq, kAwq, kInt8, kInt4, kNf4 };

// "fp8-block", "fp8-tensor", "fp8-channel", "gptq", "awq", "int8", "int4", "nf4".
const char* to_string(WeightFormat format);

// The zero-point convention of a GPTQ checkpoint (quantization_config's
// checkpoint_format).
enum class GptqZeros {
  kStoredMinusOne,  // "gptq": AutoGPTQ wrote zero - 1
  kStored,          // "gptq_v2": gptqmodel writes the zero itself
};

// NF4's double-quantized block absmax (bitsandbytes' compress_statistics).
struct Nf4Absmax {
  std::vector<uint8_t> codes;  // one per NF4 block: an index into the dynamic map
  std::vector<float> scales;   // one per `kNf4AbsmaxBlock` codes: that block's absmax
  float offset = 0.0f;         // the mean absmax, subtracted before quantizing
};

struct QuantizedWeight {
  WeightFormat format = WeightFormat::kInt8;
  std::string name;        // the Hugging Face tensor, e.g. model.layers.0.mlp.up_proj.weight
  int64_t rows = 0;        // out_features
  int64_t cols = 0;        // in_features
  int bits = 8;            // 4 or 8 (GPTQ takes either; AWQ, int4 and NF4 are 4)
  int64_t group_size = 0;  // input columns a scale covers (GPTQ, AWQ, int8/4), NF4's block
  int64_t block_rows = 0;  // kFp8Block's tile
  int64_t block_cols = 0;
  std::vector<uint8_t> packed;  // the quantized values, in the format's layout
  std::vector<float> scales;    // in the format's layout
  std::vector<uint8_t> zeros;   // GPTQ/AWQ `qzeros` (little-endian int32 words)
  std::vector<int32_t> g_idx;   // GPTQ only
  GptqZeros gptq_zeros = GptqZeros::kStoredMinusOne;
  Nf4Absmax nf4_absmax;  // kNf4 only

  // "gptq int4 g128 act-order", "fp8-block 128x128", "int8 g128": for logs.
  std::string describe() const;
  // Bytes of packed values, scales and zero points.
  size_t stored_bytes() const;
};

// The same weight borrowed: its fields and pointers to its buffers, in host
// memory for the CPU reference or in device memory once an engine has
// uploaded the same buffers (quantized_projection.h hands views to
// kernels). A view does not own and is valid while the buffers live; it is
// only ever made from a weight that validate() accepted (view_of on the
// host; an engine's upload of such a weight on the device).
struct PackedWeightView {
  WeightFormat format = WeightFormat::kInt8;
  int64_t rows = 0, cols = 0;
  int bits = 8;
  int64_t group_size = 0, block_rows = 0, block_cols = 0;
  const uint8_t* packed = nullptr;
  const float* scales = nullptr;
  const uint8_t* zeros = nullptr;  // GPTQ/AWQ packed zero points
  const int32_t* g_idx = nullptr;  // GPTQ; null: column k is in group k / group_size
  int gptq_zero_offset = 0;        // added to GPTQ's stored zeros: 1 for "gptq" (v1), 0 for v2
  const uint8_t* nf4_absmax_codes = nullptr;
  const float* nf4_absmax_scales = nullptr;
  float nf4_absmax_offset = 0.0f;
};
PackedWeightView view_of(const QuantizedWeight& weight);

// Every buffer has the size the format and shape imply, group sizes divide
// where the format needs it, and g_idx names existing groups; otherwise
// InvalidArgument naming the tensor and what is wrong.
Status validate(const QuantizedWeight& weight);

// Rows [row_begin, row_end) of W as fp32, row-major [row_end - row_begin, cols].
// Validates first.
Status dequantize_rows(const QuantizedWeight& weight, int64_t row_begin, int64_t row_end,
                       float* out);
// The same from a view, without checks (the view's weight was validated).
// The reference each kernel is held to.
void dequantize_view_rows(const PackedWeightView& weight, int64_t row_begin, int64_t row_end,
                          float* out);
// All of W, fp32 [rows, cols].
Status dequantize(const QuantizedWeight& weight, float* out);
// All of W rounded to bf16 (nearest even) from the fp32 values above.
Status dequantize_bf16(const QuantizedWeight& weight, uint16_t* out);

struct QuantizeOptions {
  int64_t group_size = 128;  // kInt8, kInt4
  int64_t block_rows = 128;  // kFp8Block
  int64_t block_cols = 128;
  int64_t nf4_block = 64;  // kNf4
};

// Quantizes W [rows, cols] (fp32, row-major) into kFp8Block, kInt8, kInt4 or
// kNf4 (the formats cohort makes at load; the others are read only). A
// non-finite value is an error naming the tensor and its position.
Result<QuantizedWeight> quantize(WeightFormat format, const std::string& name, const float* w,
                                 int64_t rows, int64_t cols, const QuantizeOptions& options = {});

}  // namespace cohort::models::quant
