// libFuzzer: a PEFT adapter folder's adapter_config.json (hf/peft_config.h),
// parsed as `[lora] adapter` and `cohort validate` read it. Whatever the
// text, the parser returns a LoRA config that validate() accepts (a rank
// within LoraConfig::kMaxRank: the adapters are sized from it) or an error
// naming the field; never a crash. What it accepts writes back and parses to
// the same adapters.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "hf/peft_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = cohort::hf::parse_peft_config(text, "adapter_config.json");
  if (!config) return 0;
  const auto& lora = config->lora;
  if (!lora.validate().is_ok() || lora.rank > cohort::models::LoraConfig::kMaxRank) std::abort();
  auto again = cohort::hf::parse_peft_config(
      cohort::hf::peft_config_json(lora, config->base_model_name_or_path), "written");
  if (!again || again->lora.rank != lora.rank || again->lora.targets != lora.targets ||
      again->lora.use_rslora != lora.use_rslora)
    std::abort();
  return 0;
}
