// A Hugging Face folder's weights under HF parameter names, in and out.
//
// Loading is shard-aware: load_weights fills a (possibly tensor-parallel)
// Model by reading only the rows or columns its ParamLayout says it holds,
// from mmapped files, so a rank never reads the whole checkpoint. Experts
// are read under the Hub's per-expert names, or from transformers 5's fused
// expert tensors where a folder has those instead (fused_experts.h).
// Errors name the folder, the tensor and what did not match.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "models/config.h"
#include "models/model.h"

namespace cohort::hf {

// Reads every parameter of `model` (its shard) from the safetensors in `dir`.
Status load_weights(models::Model& model, const std::string& dir);

// config.json + the folder of safetensors (converted to dtype). Needs an
// unsharded model (tp_size 1): gather tensor-parallel shards first.
Status save_model_folder(const models::Model& model, const std::string& dir,
                         models::DType dtype = models::DType::kBF16, size_t max_shard_bytes = size_t{5} << 30);

// config + weights in one call.
Result<std::unique_ptr<models::Model>> load_model(const std::string& dir, const models::ShardSpec& shard,
                                                  models::Backend* backend, models::TensorParallelComm tp = {},
                                                  int max_seq_cap = 8192);

}  // namespace cohort::hf
