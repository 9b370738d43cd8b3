// Where an inference job's model comes from: its config and weights from
// `[model] preset` (random init from infer.seed), `hf_dir` (config.json +
// safetensors, sharded or not) or `checkpoint` (a cohort checkpoint folder,
// or the `latest` file naming one). Weight loading reads only the slices the
// model's tensor-parallel shard holds.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "jobs/spec.h"
#include "models/config.h"
#include "models/model.h"

namespace cohort::infer {

// A checkpoint path as given, or the folder a `latest` file names.
std::string resolve_checkpoint_dir(const std::string& path);

// The global model config, with [model] max_seq applied when set.
Result<models::ModelConfig> infer_model_config(const jobs::ModelSection& model);

// Fills a freshly created model (any shard of infer_model_config's config).
Status load_infer_weights(const jobs::ModelSection& model, int64_t seed, models::Model& target);

// "preset tiny", "hf_dir /path", "checkpoint /path", for logs and the summary.
std::string model_source(const jobs::ModelSection& model);

}  // namespace cohort::infer
