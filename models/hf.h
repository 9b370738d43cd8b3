// Hugging Face interop: config.json (model_type qwen3, qwen2, llama) and
// weights under HF parameter names, in and out.
//
// Loading is shard-aware: load_hf_weights fills a (possibly tensor-parallel)
// Model by reading only the rows or columns its ParamLayout says it holds,
// from mmapped files, so a rank never reads the whole checkpoint.
// Errors name the folder, the tensor and what did not match.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "models/config.h"
#include "models/model.h"

namespace cohort::models {

// Parses `dir`/config.json (or a path to a .json file). max_seq becomes
// min(max_position_embeddings, max_seq_cap).
Result<ModelConfig> load_hf_config(const std::string& path, int max_seq_cap = 8192);
Result<ModelConfig> parse_hf_config(const std::string& json_text, int max_seq_cap = 8192);
std::string hf_config_json(const ModelConfig& config, DType dtype = DType::kBF16);

// Reads every parameter of `model` (its shard) from the safetensors in `dir`.
Status load_hf_weights(Model& model, const std::string& dir);

// config.json + the folder of safetensors (converted to dtype). Needs an
// unsharded model (tp_size 1): gather tensor-parallel shards first.
Status save_hf(const Model& model, const std::string& dir, DType dtype = DType::kBF16,
               size_t max_shard_bytes = size_t{5} << 30);

// config + weights in one call.
Result<std::unique_ptr<Model>> load_hf_model(const std::string& dir, const ShardSpec& shard,
                                             Backend* backend, TensorParallelComm tp = {},
                                             int max_seq_cap = 8192);

}  // namespace cohort::models
