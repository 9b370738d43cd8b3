// A quantized checkpoint's tensor sets, recognised by their Hugging Face
// names and read into models::quant::QuantizedWeight, for a linear weight
// named P.weight of shape [out, in]:
//
//   fp8   P.weight (F8_E4M3 [out, in]) with P.weight_scale_inv (the tile grid
//         [ceil(out/128), ceil(in/128)] of transformers' FineGrainedFP8) or
//         P.weight_scale (one value: per tensor; [out] or [out, 1]: per channel)
//   gptq  P.qweight (I32 [in * bits / 32, out]), P.qzeros (I32 [groups,
//         out * bits / 32]), P.scales ([groups, out]), P.g_idx (I32 [in];
//         required with desc_act)
//   awq   P.qweight (I32 [in, out / 8]), P.qzeros (I32 [in / group, out / 8]),
//         P.scales ([in / group, out])
//
// Scales may be F32, BF16 or F16. A weight stored as a plain float tensor
// (a module in modules_to_not_convert, the embedding, the norms) is not
// quantized: readers return nullopt and the caller reads it as before.
// Every error names the folder and the tensor.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "hf/quantization_config.h"
#include "hf/safetensors.h"
#include "models/param_layout.h"
#include "models/quant/quantized_weight.h"

namespace cohort::hf {

// The quantized set stored for `weight_name` (P.weight), checked against
// `shape` [out, in] and the config; nullopt when it is a plain tensor. A
// quantized set the config does not declare is an error.
Result<std::optional<models::quant::QuantizedWeight>> read_quantized_weight(
    const SafetensorsCheckpoint& checkpoint, const QuantizationConfig& config,
    const std::string& weight_name, const std::vector<int64_t>& shape);

// How `name` is stored, from the headers alone: the quantized format
// ("fp8-block 128x128", "gptq int4 g128 act-order", ...) or the plain
// tensor's dtype ("bf16", "f32"). For logs and summaries.
Result<std::string> stored_weight_format(const SafetensorsCheckpoint& checkpoint,
                                         const QuantizationConfig& config, const std::string& name);

// Rows [row_begin, row_end) of this rank's slice of parameter `param`
// (ParamSpec's tensor-parallel cut of the global weight `weight`) into
// `param_data` (the parameter's own storage, [param.shape]).
Status dequantize_param_rows(const models::quant::QuantizedWeight& weight,
                             const models::ParamSpec& param, int64_t row_begin, int64_t row_end,
                             float* param_data);

}  // namespace cohort::hf
