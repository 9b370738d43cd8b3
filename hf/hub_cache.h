// Hugging Face model ids ("Qwen/Qwen3-0.6B") found where huggingface_hub
// keeps its downloads: $HF_HUB_CACHE, else $HF_HOME/hub, else
// ~/.cache/huggingface/hub, in models--ORG--NAME/snapshots/REV, REV being
// what refs/main names (else the only snapshot there). cohort never
// downloads; a model that is not there is an error naming where it looked.
// A library of its own (base only), so the job loader can resolve
// [model] hf_dir without linking the rest of hf/.
#pragma once

#include <string>

#include "base/status.h"

namespace cohort::hf {

// "ORG/NAME" with letters, digits, '.', '_' and '-' in each part, and not
// starting with '.' (so "./x" and "../x" are paths).
bool looks_like_hub_id(const std::string& text);

// The cache folder looked in (from the environment, as huggingface_hub does).
std::string hub_cache_dir();

// The snapshot folder of `id`; NotFound names the folder looked in and how
// to fill it.
Result<std::string> find_in_hub_cache(const std::string& id);

}  // namespace cohort::hf
