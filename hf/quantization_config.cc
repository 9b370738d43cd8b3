// quantization_config parsing: each method's fields as transformers'
// FineGrainedFP8Config, GPTQConfig and AwqConfig write them (and AutoAWQ's
// older w_bit / q_group_size spellings), every unsupported variant refused
// by name.
#include "hf/quantization_config.h"

#include "hf/json_field.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace cohort::hf {
namespace {

using nlohmann::json;

const std::string kQuantizationWhere = "config.json: quantization_config.";

Status field_error(const std::string& key, const std::string& what) {
  return invalid_argument(kQuantizationWhere + key + " " + what);
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// The first of `keys` present and non-null, else null.
const json* find(const json& j, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (j.contains(k) && !j[k].is_null()) return &j[k];
  return nullptr;
}

Status int_field(const json& j, std::initializer_list<const char*> keys, int fallback, int* out) {
  const json* v = find(j, keys);
  if (!v) {
    *out = fallback;
    return Status::ok();
  }
  if (!v->is_number_integer() || v->get<int64_t>() < -1 || v->get<int64_t>() > (1 << 20)) {
    return field_error(*keys.begin(), "must be an integer, got " + v->dump());
  }
  *out = static_cast<int>(v->get<int64_t>());
  return Status::ok();
}

Status string_field(const json& j, std::initializer_list<const char*> keys,
                    const std::string& fallback, std::string* out) {
  const json* v = find(j, keys);
  if (!v) {
    *out = fallback;
    return Status::ok();
  }
  if (!v->is_string()) return field_error(*keys.begin(), "must be a string, got " + v->dump());
  *out = v->get<std::string>();
  return Status::ok();
}

Status parse_fp8(const json& j, QuantizationConfig* c) {
  c->bits = 8;
  std::string fmt, scheme;
  COHORT_RETURN_IF_ERROR(string_field(j, {"fmt"}, "e4m3", &fmt));
  if (lower(fmt) != "e4m3") return field_error("fmt", "\"" + fmt + "\" is not supported (e4m3 is)");
  COHORT_RETURN_IF_ERROR(string_field(j, {"activation_scheme"}, "dynamic", &scheme));
  if (scheme != "dynamic") {
    return field_error("activation_scheme",
                       "\"" + scheme +
                           "\" is not supported: cohort reads FP8 weights with dynamic "
                           "activations (no input_scale)");
  }
  // Absent: transformers' default tile, 128 x 128; null: per-tensor or
  // per-channel scales.
  c->weight_block_size = {128, 128};
  if (j.contains("weight_block_size")) {
    const json& b = j["weight_block_size"];
    if (b.is_null()) {
      c->weight_block_size = {0, 0};
    } else if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() ||
               !b[1].is_number_integer() || b[0].get<int64_t>() <= 0 || b[1].get<int64_t>() <= 0 ||
               b[0].get<int64_t>() > 65536 || b[1].get<int64_t>() > 65536) {
      return field_error("weight_block_size",
                         "must be null or two positive integers, got " + b.dump());
    } else {
      c->weight_block_size = {b[0].get<int>(), b[1].get<int>()};
    }
  }
  return Status::ok();
}

Status parse_gptq(const json& j, QuantizationConfig* c) {
  COHORT_RETURN_IF_ERROR(int_field(j, {"bits"}, 4, &c->bits));
  if (c->bits != 4 && c->bits != 8) {
    return field_error("bits",
                       "is " + std::to_string(c->bits) + "; cohort loads 4- and 8-bit GPTQ");
  }
  COHORT_RETURN_IF_ERROR(int_field(j, {"group_size"}, 128, &c->group_size));
  if (c->group_size == 0 || c->group_size < -1) {
    return field_error("group_size",
                       "must be positive or -1, got " + std::to_string(c->group_size));
  }
  COHORT_RETURN_IF_ERROR(bool_field(j, "desc_act", false, &c->desc_act, kQuantizationWhere));
  COHORT_RETURN_IF_ERROR(bool_field(j, "sym", true, &c->sym, kQuantizationWhere));
  std::string format;
  COHORT_RETURN_IF_ERROR(string_field(j, {"checkpoint_format", "format"}, "gptq", &format));
  if (format == "gptq") {
    c->gptq_zeros = models::quant::GptqZeros::kStoredMinusOne;
  } else if (format == "gptq_v2") {
    c->gptq_zeros = models::quant::GptqZeros::kStored;
  } else {
    return field_error("checkpoint_format",
                       "\"" + format + "\" is not supported (gptq and gptq_v2 are)");
  }
  return Status::ok();
}

Status parse_awq(const json& j, QuantizationConfig* c) {
  COHORT_RETURN_IF_ERROR(int_field(j, {"bits", "w_bit"}, 4, &c->bits));
  if (c->bits != 4)
    return field_error("bits", "is " + std::to_string(c->bits) + "; AWQ checkpoints are 4-bit");
  COHORT_RETURN_IF_ERROR(int_field(j, {"group_size", "q_group_size"}, 128, &c->group_size));
  if (c->group_size <= 0)
    return field_error("group_size", "must be positive, got " + std::to_string(c->group_size));
  bool zero_point = true;
  COHORT_RETURN_IF_ERROR(bool_field(j, "zero_point", true, &zero_point, kQuantizationWhere));
  if (!zero_point)
    return field_error("zero_point", "is false; cohort reads AWQ's GEMM packing with zero points");
  std::string version, backend;
  COHORT_RETURN_IF_ERROR(string_field(j, {"version"}, "gemm", &version));
  if (lower(version) != "gemm") {
    return field_error("version",
                       "\"" + version + "\" is not supported: cohort reads the GEMM packing");
  }
  COHORT_RETURN_IF_ERROR(string_field(j, {"backend"}, "autoawq", &backend));
  if (lower(backend) != "autoawq") {
    return field_error("backend", "\"" + backend + "\" is not supported (autoawq's packing is)");
  }
  return Status::ok();
}

}  // namespace

std::string QuantizationConfig::describe() const {
  const std::string group = group_size == -1 ? " per-row" : " g" + std::to_string(group_size);
  switch (method) {
    case QuantMethod::kNone:
      return "";
    case QuantMethod::kFp8:
      return weight_block_size[0] > 0 ? "fp8 e4m3 " + std::to_string(weight_block_size[0]) + "x" +
                                            std::to_string(weight_block_size[1]) + " blocks"
                                      : "fp8 e4m3 per-tensor/channel";
    case QuantMethod::kGptq:
      return "gptq int" + std::to_string(bits) + group + (desc_act ? " act-order" : "") +
             (gptq_zeros == models::quant::GptqZeros::kStored ? " v2" : "");
    case QuantMethod::kAwq:
      return "awq int4" + group;
  }
  return "";
}

Result<QuantizationConfig> parse_quantization_config(const json& j) {
  if (!j.is_object())
    return invalid_argument("config.json: quantization_config must be an object, got " + j.dump());
  QuantizationConfig c;
  std::string method;
  COHORT_RETURN_IF_ERROR(string_field(j, {"quant_method"}, "", &method));
  method = lower(method);
  if (method == "fp8") {
    c.method = QuantMethod::kFp8;
    COHORT_RETURN_IF_ERROR(parse_fp8(j, &c));
  } else if (method == "gptq") {
    c.method = QuantMethod::kGptq;
    COHORT_RETURN_IF_ERROR(parse_gptq(j, &c));
  } else if (method == "awq") {
    c.method = QuantMethod::kAwq;
    COHORT_RETURN_IF_ERROR(parse_awq(j, &c));
  } else {
    return field_error("quant_method",
                       "\"" + method +
                           "\" is not supported: cohort loads fp8, gptq and awq checkpoints "
                           "(or use a bf16 folder with [model] quantize)");
  }
  if (const json* m = find(j, {"modules_to_not_convert"})) {
    if (!m->is_array()) return field_error("modules_to_not_convert", "must be a list of names");
    for (const json& name : *m) {
      if (!name.is_string())
        return field_error("modules_to_not_convert", "must be a list of names");
      c.modules_to_not_convert.push_back(name.get<std::string>());
    }
  }
  return c;
}

Result<QuantizationConfig> load_quantization_config(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path file = fs::path(dir) / "config.json";
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return QuantizationConfig{};
  std::ifstream in(file);
  const json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument(file.string() + ": not a JSON object");
  if (!j.contains("quantization_config") || j["quantization_config"].is_null())
    return QuantizationConfig{};
  auto config = parse_quantization_config(j["quantization_config"]);
  if (!config.is_ok()) return config.status().with_context(file.string());
  return config;
}

}  // namespace cohort::hf
