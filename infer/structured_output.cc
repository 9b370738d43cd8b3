// Structured-output specs (see structured_output.h).
#include "infer/structured_output.h"

namespace cohort::infer {

using ojson = nlohmann::ordered_json;

std::string constraint_spec(const ojson& schema, const std::string& prefix, const std::string& suffix) {
  return ojson{{"schema", schema}, {"prefix", prefix}, {"suffix", suffix}}.dump();
}

Result<std::shared_ptr<const text::JsonGrammar>> compile_constraint(const std::string& spec) {
  const ojson j = ojson::parse(spec, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("schema") || !j.value("prefix", ojson()).is_string() ||
      !j.value("suffix", ojson()).is_string()) {
    return invalid_argument("a malformed structured-output spec");
  }
  return text::JsonGrammar::compile(j["schema"], j["prefix"].get<std::string>(), j["suffix"].get<std::string>());
}

}  // namespace cohort::infer
