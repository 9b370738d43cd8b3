// A PEFT adapter folder: adapter_config.json (peft_config.h) and
// adapter_model.safetensors, whose tensors carry PEFT's names
// (base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight, ...:
// models::peft_tensor_name), lora_A [r, in] and lora_B [out, r] in fp32.
// transformers + PEFT load it with PeftModel.from_pretrained(base, dir);
// cohort writes one with every LoRA checkpoint and `cohort export`, and
// starts training from one (`[lora] adapter`).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "hf/peft_config.h"
#include "hf/safetensors.h"
#include "models/lora.h"

namespace cohort::hf {

// Writes dir/adapter_config.json and dir/adapter_model.safetensors (the
// folder is created). `tensors` are the unsharded adapters.
Status write_peft_adapter(const std::string& dir, const models::LoraConfig& lora,
                          const std::string& base_model_name_or_path,
                          const std::vector<TensorToWrite>& tensors);

// Fills `adapters` (any tensor-parallel shard; its config must have the
// folder's rank and target modules) with their slices of the folder's
// tensors. Errors name the folder and the tensor that is missing or whose
// shape differs.
Status load_peft_adapter(const std::string& dir, models::LoraAdapters& adapters);

// Reads the folder's adapters for `model`'s shard and merges them into its
// weights (models::merge_lora_adapters): `[model] adapter` for inference
// and serving. Errors name the folder (a config cohort's adapters cannot
// be, a missing or misshapen tensor, a model LoRA cannot sit on).
Status merge_peft_adapter(const std::string& dir, models::Model& model);
// The folder's adapters for `model`'s shard, read and not merged (for a
// merge group by group as a streamed model loads, models::merge_lora_group).
Result<std::unique_ptr<models::LoraAdapters>> read_peft_adapter_for(const std::string& dir,
                                                                    const models::Model& model);

}  // namespace cohort::hf
