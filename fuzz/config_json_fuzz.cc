// libFuzzer: a model folder's config.json (hf/config_json.h), parsed into a
// ModelConfig as every job kind reads it. Whatever the text, the parser
// returns a config that validate() accepts, within models::ModelLimits, or
// an error naming the field; never a crash, and never a size nothing
// checked (the caller allocates from these).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "hf/config_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = cohort::hf::parse_config_json(text, 32768);
  if (!config) return 0;
  using Limits = cohort::models::ModelLimits;
  if (!config->validate().is_ok() || config->hidden > Limits::kMaxHidden || config->layers > Limits::kMaxLayers ||
      config->vocab_size > Limits::kMaxVocab || config->max_seq > Limits::kMaxSeq ||
      config->num_parameters() > Limits::kMaxParameters)
    std::abort();
  (void)cohort::hf::config_json_text(*config);
  return 0;
}
