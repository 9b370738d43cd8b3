// config.json of a Hugging Face model folder (model_type qwen3, qwen2,
// llama, and the mixtures of experts qwen3_moe and mixtral): parsed into a ModelConfig that validate() has checked against
// ModelLimits before anything is sized from it, and written back for exports.
// Errors name the file and the field.
#pragma once

#include <string>

#include "base/status.h"
#include "models/config.h"
#include "models/tensor.h"

namespace cohort::hf {

// Parses `dir`/config.json (or a path to a .json file). max_seq becomes
// min(max_position_embeddings, max_seq_cap).
Result<models::ModelConfig> load_config_json(const std::string& path, int max_seq_cap = 8192);
Result<models::ModelConfig> parse_config_json(const std::string& json_text, int max_seq_cap = 8192);
// The config.json text of `config`, with torch_dtype naming `dtype`.
std::string config_json_text(const models::ModelConfig& config, models::DType dtype = models::DType::kBF16);
// `dir`/config.json, written whole (base/atomic_file.h): every export and
// save writes it here.
Status write_config_json(const std::string& dir, const models::ModelConfig& config, models::DType dtype);

}  // namespace cohort::hf
