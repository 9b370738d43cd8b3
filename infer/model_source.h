// Where an inference job's weights come from: `[model] preset` (random init
// from infer.seed), `hf_dir` (safetensors, sharded or not) or `checkpoint`
// (parallel::resolve_checkpoint_path). Weight loading reads only the slices
// the model's tensor-parallel shard holds. The config is
// worker::resolve_model_config's, shared with training.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "jobs/spec.h"
#include "models/config.h"
#include "models/model.h"

namespace cohort::infer {

// Fills a freshly created model (any shard of worker::resolve_model_config's config).
Status load_infer_weights(const jobs::ModelSection& model, int64_t seed, models::Model& target);

// "preset tiny", "hf_dir /path", "checkpoint /path", for logs and the summary.
std::string model_source(const jobs::ModelSection& model);

}  // namespace cohort::infer
