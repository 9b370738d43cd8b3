// Where an inference job's weights come from: `[model] preset` (random init
// from infer.seed), `hf_dir` (safetensors, sharded or not, pre-quantized or
// not) or `checkpoint` (parallel::resolve_checkpoint_path), then `quantize`.
// Weight loading reads only the slices the model's tensor-parallel shard
// holds. The config is worker::resolve_model_config's, shared with training.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "base/status.h"
#include "jobs/spec.h"
#include "models/config.h"
#include "models/model.h"

namespace cohort::infer {

// Fills a freshly created model (any shard of worker::resolve_model_config's
// config). Where the source streams (model_streams_blocks), each group is
// finished as soon as the loader has filled it (`[model] adapter` merged,
// `quantize` round-tripped) and only then reaches the model's
// group-filled listener, so a model of Buffers::kStreamedBlocks loads a
// block at a time.
Status load_infer_weights(const jobs::ModelSection& model, int64_t seed, models::Model& target);

// Whether load_infer_weights hands the listener every group once, final:
// a preset, a Hugging Face folder or a full checkpoint. A LoRA checkpoint
// merges its adapters into the whole base after loading it, so its groups
// are final only at the end.
bool model_streams_blocks(const jobs::ModelSection& model);

// "preset tiny", "hf_dir /path", "checkpoint /path", for logs and the summary.
std::string model_source(const jobs::ModelSection& model);

// Which format each weight uses as loaded, [model] quantize included:
// "196 fp8-block 128x128, 57 bf16" for logs; the counts by format for
// summary.json when `by_format` is given (hf/load_quantization.h).
Result<std::string> weight_formats(const jobs::ModelSection& model, const models::ModelConfig& config,
                                   std::map<std::string, int>* by_format = nullptr);

}  // namespace cohort::infer
