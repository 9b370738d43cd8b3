// Structured output as the server passes it around: a grammar spec (a JSON
// schema, or none for any object, with literal text around the value) as
// one string that rank 0 sends its other ranks, and the per-sequence guide
// built from it (text/token_constraint.h).
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "text/json_grammar.h"
#include "text/token_constraint.h"

namespace cohort::infer {

// {"schema": ..., "prefix": ..., "suffix": ...}; schema null: any JSON object.
std::string constraint_spec(const nlohmann::ordered_json& schema, const std::string& prefix = "",
                            const std::string& suffix = "");
// Errors name what is wrong in the schema (text/json_grammar.h).
Result<std::shared_ptr<const text::JsonGrammar>> compile_constraint(const std::string& spec);

}  // namespace cohort::infer
