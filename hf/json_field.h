// Typed fields of a model folder's JSON files, read with an error that
// names where the field is ("config.json: quantization_config.sym must be
// true or false, got 1").
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace cohort::hf {

// j[key] as a boolean; absent or null gives `fallback`. `where` prefixes the
// key in the error ("config.json: ").
inline Status bool_field(const nlohmann::json& j, const char* key, bool fallback, bool* out,
                         const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) {
    *out = fallback;
    return Status::ok();
  }
  if (!j[key].is_boolean()) {
    return invalid_argument(where + key + " must be true or false, got " + j[key].dump());
  }
  *out = j[key].get<bool>();
  return Status::ok();
}

}  // namespace cohort::hf
