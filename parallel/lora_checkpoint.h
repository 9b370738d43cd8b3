// Private to parallel/ (checkpoints): what a LoRA run's checkpoint adds to
// the sharded format (checkpoint.h): index.json's "lora" entry (the
// adapters' config, the frozen base's dtype and source), the PEFT adapter
// folder written beside the shards, and the adapters merged into a model.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "models/lora_config.h"
#include "models/model.h"
#include "parallel/checkpoint.h"
#include "parallel/checkpoint_format.h"

namespace cohort::parallel {

struct LoraCheckpoint {
  models::LoraConfig lora;
  BaseModelSource base;
};

nlohmann::json lora_index_entry(const models::LoraConfig& lora, const BaseModelSource& base);
// The index's "lora" entry; nullopt for a full-model checkpoint. Errors name
// the index file and the field.
Result<std::optional<LoraCheckpoint>> read_lora_entry(const nlohmann::json& index,
                                                      const std::string& dir);

// Whether a run with `job_lora` (null: full training) may resume from a
// checkpoint with `saved` (null: a full-model checkpoint): the same kind, and
// for LoRA the same rank, target modules, scale and base dtype.
Status check_resumable(const std::string& dir, const std::optional<LoraCheckpoint>& saved,
                       const models::LoraConfig* job_lora);

// out_dir as a PEFT adapter folder: the unsharded adapters assembled from
// the checkpoint's pieces. `covered_only`: a node-local checkpoint may hold
// only some ranks' pieces; then nothing is written and false comes back.
Result<bool> write_checkpoint_adapter(const std::string& dir, const LoraCheckpoint& saved,
                                      const PieceIndex& pieces, const models::ModelConfig& config,
                                      const std::string& out_dir, bool covered_only = false);

// Fills `model` (any tensor-parallel shard, on any backend) with the base the
// adapters were trained on, at its dtype, and the adapters merged into it:
// W + scale · B A.
Status load_merged_lora(const std::string& dir, const LoraCheckpoint& saved,
                        const PieceIndex& pieces, models::Model& model);

}  // namespace cohort::parallel
