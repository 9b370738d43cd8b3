// config.json's quantization_config: which pre-quantized checkpoint format a
// Hugging Face folder holds, with the fields that decide how its tensors are
// read. cohort loads these (models/quant/quantized_weight.h has the layouts):
//
//   quant_method "fp8"   transformers' FineGrainedFP8Config: fmt "e4m3",
//                        activation_scheme "dynamic", weight_block_size
//                        [128, 128] (weight_scale_inv per tile) or null
//                        (weight_scale per tensor or per channel)
//   quant_method "gptq"  transformers' GPTQConfig / AutoGPTQ / gptqmodel:
//                        bits 4 or 8, group_size (-1: one group), desc_act,
//                        sym, checkpoint_format "gptq" (v1) or "gptq_v2"
//   quant_method "awq"   transformers' AwqConfig / AutoAWQ: bits 4,
//                        group_size, zero_point true, version "gemm"
//
// Any other method or variant is refused with an error naming the field and
// what cohort supports, at config.json parse time (so `cohort validate` and
// every load refuse it alike). modules_to_not_convert needs no handling:
// those modules' weights are stored unquantized and load as such.
#pragma once

#include <array>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"
#include "models/quant/quantized_weight.h"

namespace cohort::hf {

enum class QuantMethod { kNone, kFp8, kGptq, kAwq };

struct QuantizationConfig {
  QuantMethod method = QuantMethod::kNone;
  int bits = 0;           // gptq 4 | 8, awq 4, fp8 8
  int group_size = 0;     // gptq / awq: input columns per scale; -1: the whole row
  bool desc_act = false;  // gptq act-order: g_idx permutes the groups
  bool sym = true;        // gptq: symmetric (zero points are then all 8)
  models::quant::GptqZeros gptq_zeros = models::quant::GptqZeros::kStoredMinusOne;
  std::array<int, 2> weight_block_size = {
      0, 0};  // fp8: [rows, cols] per scale; 0: per tensor / channel
  std::vector<std::string> modules_to_not_convert;

  bool quantized() const { return method != QuantMethod::kNone; }
  // "fp8 e4m3 128x128 blocks", "gptq int4 g128 act-order", "awq int4 g128"; "" when none.
  std::string describe() const;
};

// `section` is config.json's quantization_config object.
Result<QuantizationConfig> parse_quantization_config(const nlohmann::json& section);
// `dir`/config.json's, method kNone when it has none (or there is no config.json).
Result<QuantizationConfig> load_quantization_config(const std::string& dir);

}  // namespace cohort::hf
