// adapter_config.json in and out (peft_config.h).
#include "hf/peft_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace cohort::hf {

using nlohmann::json;

namespace {

constexpr size_t kMaxConfigBytes = size_t{1} << 20;  // PEFT's are about 1 KB

// PEFT stores integers where it can (lora_alpha is typed int).
json number(double v) {
  if (std::floor(v) == v && std::fabs(v) < 1e15) return json(int64_t(v));
  return json(v);
}

// "value" in quotes; appended piece by piece (GCC 12 warns, wrongly, about
// "\"" + s + "\"").
std::string quoted(const std::string& s) {
  std::string out(1, '"');
  out += s;
  out += '"';
  return out;
}

bool null_or_empty(const json& v) {
  return v.is_null() || (v.is_array() && v.empty()) || (v.is_object() && v.empty());
}

}  // namespace

std::string peft_config_json(const models::LoraConfig& lora, const std::string& base_model) {
  json targets = json::array();
  for (models::LoraTarget t : lora.targets) targets.push_back(models::peft_module_name(t));
  json init = lora.init == models::LoraInit::kGaussian ? json("gaussian") : json(true);
  json config = {
      {"alpha_pattern", json::object()},
      {"auto_mapping", nullptr},
      {"base_model_name_or_path", base_model.empty() ? json(nullptr) : json(base_model)},
      {"bias", "none"},
      {"fan_in_fan_out", false},
      {"inference_mode", true},
      {"init_lora_weights", init},
      {"layers_pattern", nullptr},
      {"layers_to_transform", nullptr},
      {"lora_alpha", number(lora.alpha)},
      {"lora_bias", false},
      {"lora_dropout", lora.dropout},
      {"modules_to_save", nullptr},
      {"peft_type", "LORA"},
      {"r", lora.rank},
      {"rank_pattern", json::object()},
      {"revision", nullptr},
      {"target_modules", targets},
      {"task_type", "CAUSAL_LM"},
      {"use_dora", false},
      {"use_rslora", lora.use_rslora},
  };
  return config.dump(2) + "\n";
}

Result<PeftAdapterConfig> parse_peft_config(const std::string& text, const std::string& source) {
  if (text.size() > kMaxConfigBytes)
    return invalid_argument(source + ": " + std::to_string(text.size()) +
                            " bytes; an adapter config is at most " +
                            std::to_string(kMaxConfigBytes));
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return invalid_argument(source + ": not a JSON object");
  const char* field = "peft_type";
  auto refuse = [&](const std::string& why) {
    return invalid_argument(source + ": " + field + ": " + why);
  };
  try {
    if (doc.value(field, std::string()) != "LORA")
      return refuse(quoted(doc.value(field, std::string())) +
                    ": cohort reads LoRA adapters (\"LORA\") only");
    PeftAdapterConfig out;
    models::LoraConfig& lora = out.lora;
    field = "r";
    // Checked before converting: nlohmann's conversion of a float beyond
    // int is undefined behaviour, not an error.
    const json& rank = doc.at(field);
    if (!rank.is_number_integer() || rank.get<int64_t>() < 1 ||
        rank.get<int64_t>() > models::LoraConfig::kMaxRank)
      return refuse(rank.dump() + ": the rank is an integer from 1 to " +
                    std::to_string(models::LoraConfig::kMaxRank));
    lora.rank = int(rank.get<int64_t>());
    field = "lora_alpha";
    lora.alpha = doc.value(field, 8.0);
    field = "lora_dropout";
    lora.dropout = doc.value(field, 0.0);
    field = "use_rslora";
    lora.use_rslora = doc.value(field, false);
    field = "init_lora_weights";
    const json init = doc.value(field, json(true));
    lora.init = init.is_string() && init.get<std::string>() == "gaussian"
                    ? models::LoraInit::kGaussian
                    : models::LoraInit::kKaimingUniform;
    field = "base_model_name_or_path";
    if (doc.contains(field) && doc[field].is_string())
      out.base_model_name_or_path = doc[field].get<std::string>();
    // What cohort's adapters are not: refused by name rather than ignored.
    for (const char* flag : {"use_dora", "fan_in_fan_out", "lora_bias"}) {
      field = flag;
      if (doc.value(flag, false)) return refuse("true is not supported (plain LoRA adapters only)");
    }
    field = "bias";
    if (doc.value(field, std::string("none")) != "none")
      return refuse(quoted(doc[field].get<std::string>()) + ": cohort trains no biases (\"none\")");
    for (const char* list :
         {"rank_pattern", "alpha_pattern", "modules_to_save", "layers_to_transform",
          "layers_pattern", "exclude_modules", "target_parameters"}) {
      field = list;
      if (doc.contains(list) && !null_or_empty(doc[list]))
        return refuse(
            "is set; cohort's adapters have one rank and alpha on every layer's target modules");
    }
    field = "target_modules";
    const json& targets = doc.at(field);
    std::vector<std::string> names;
    if (targets.is_string()) {
      if (targets.get<std::string>() != "all-linear")
        return refuse(quoted(targets.get<std::string>()) + ": a pattern; give the module names");
      names.push_back("all-linear");
    } else {
      for (const json& t : targets) names.push_back(t.get<std::string>());
    }
    auto made = models::make_lora_config(lora.rank, lora.alpha, lora.dropout, names,
                                         lora.use_rslora, models::to_string(lora.init), "bf16");
    if (!made) return refuse(made.status().message());
    lora.targets = made->targets;
    return out;
  } catch (const json::exception& e) {
    return refuse(e.what());
  }
}

Result<PeftAdapterConfig> read_peft_config(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "adapter_config.json").string();
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return not_found(path +
                     " is missing (a PEFT adapter folder holds adapter_config.json and "
                     "adapter_model.safetensors)");
  std::stringstream text;
  text << in.rdbuf();
  return parse_peft_config(text.str(), path);
}

}  // namespace cohort::hf
