// Quantization as a model loads, beyond reading pre-quantized folders
// (quantized_tensors.h):
//
//   [model] quantize = "fp8" | "int8" | "int4": after the weights are loaded
//   from any source (preset, Hugging Face folder, cohort checkpoint), every
//   linear projection (q/k/v/o_proj, gate/up/down_proj) is quantized to the
//   format and dequantized back into its fp32 parameter, so the model runs
//   with the numbers a quantized engine will have: fp8 as 128 x 128
//   e4m3 tiles (transformers' FineGrainedFP8 recipe), int8 / int4 with one
//   symmetric scale per 128 input columns (models/quant/quantized_weight.h,
//   which states each format's error bound). Embeddings, norms and the LM
//   head keep their values.
//
//   The weight-format summary: which format each weight of a model is
//   stored in, counted by format, for the startup log line and summary.json.
//
// Errors name the weight and the option at fault.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "base/status.h"
#include "models/config.h"
#include "models/model.h"
#include "models/quant/quantized_weight.h"

namespace cohort::hf {

// The job file's `quantize` values: "none" (nullopt), "fp8", "int8", "int4".
Result<std::optional<models::quant::WeightFormat>> parse_quantize_option(const std::string& value);
// Whether `quantize` applies to this Hugging Face parameter name (one
// definition, models/param_layout.h: QLoRA's quantized base takes the same).
using models::is_projection_weight;

// Round-trips this rank's projections through `format` (any backend: weights
// travel through host memory). A tensor-parallel slice must begin and end on
// the format's groups (128-column groups, 128 x 128 tiles) of the whole
// weight, so that every rank quantizes exactly as the unsharded model would.
Status quantize_round_trip(models::Model& model, models::quant::WeightFormat format);
// The same for group `g` alone (a model that streams its blocks as they
// load, models::Model::Buffers::kStreamedBlocks).
Status quantize_round_trip_group(models::Model& model, int g, models::quant::WeightFormat format);

// `quantize` applied after loading from `hf_dir` (may be empty: a preset or
// checkpoint): refused for a folder that is already quantized.
Status apply_quantize_option(models::Model& model, const std::string& quantize,
                             const std::string& hf_dir);
// The format `quantize` names for a model loaded from `hf_dir`, with the
// same refusal; nullopt for "none".
Result<std::optional<models::quant::WeightFormat>> quantize_option_for(const std::string& quantize,
                                                                       const std::string& hf_dir);

struct WeightFormatSummary {
  std::map<std::string, int> weights_by_format;  // "fp8-block 128x128" -> 196, "bf16" -> 57
  // "196 fp8-block 128x128, 57 bf16": largest count first.
  std::string describe() const;
};

// The formats of every weight of `config`'s model as it will load: from
// `hf_dir`'s headers (quantized sets and plain dtypes), "f32" for presets and
// checkpoints, and `quantize`'s format for the projections it applies to.
Result<WeightFormatSummary> summarize_weight_formats(const models::ModelConfig& config,
                                                     const std::string& hf_dir,
                                                     const std::string& quantize);

}  // namespace cohort::hf
