// adapter_config.json: a PEFT LoRA adapter's configuration, as PEFT writes it
// (PeftModel.save_pretrained) and reads it back (PeftModel.from_pretrained).
//
// cohort writes PEFT's LoraConfig fields with their meaning here (peft_type
// LORA, task_type CAUSAL_LM, r, lora_alpha, lora_dropout, target_modules,
// use_rslora, init_lora_weights, bias "none", no DoRA, no per-module ranks)
// and reads any folder that describes adapters of that kind. A config using
// what cohort's adapters do not have (DoRA, bias training, rank_pattern or
// alpha_pattern, modules_to_save, layers_to_transform, a regular-expression
// target_modules) is refused with the field named, never half-loaded.
// CPU only: the control plane reads it too (`cohort validate`).
#pragma once

#include <string>

#include "base/status.h"
#include "models/lora_config.h"

namespace cohort::hf {

struct PeftAdapterConfig {
  models::LoraConfig lora;  // base_dtype is not PEFT's: left at its default
  std::string base_model_name_or_path;
};

// The file's text: PEFT's fields, target_modules as the PEFT names.
std::string peft_config_json(const models::LoraConfig& lora,
                             const std::string& base_model_name_or_path);

// Parses adapter_config.json text; errors start with `source` and name the field.
Result<PeftAdapterConfig> parse_peft_config(const std::string& text, const std::string& source);
// dir/adapter_config.json.
Result<PeftAdapterConfig> read_peft_config(const std::string& dir);

}  // namespace cohort::hf
