// config.json in and out: Hugging Face's field names (transformers 4 and 5
// spellings of RoPE) to the validated ModelConfig, and back for exports.
#include "hf/config_json.h"

#include "base/atomic_file.h"
#include "hf/json_field.h"
#include "hf/quantization_config.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace cohort::hf {

using models::DType;
using models::ModelConfig;
namespace {

using nlohmann::json;

// RoPE settings: transformers 4 writes rope_theta at the top and rope_scaling
// beside it; transformers 5 writes both inside rope_parameters.
const json* rope_section(const json& j) {
  for (const char* key : {"rope_scaling", "rope_parameters"})
    if (j.contains(key) && j[key].is_object()) return &j[key];
  return nullptr;
}

float parse_rope_theta(const json& j) {
  if (j.contains("rope_theta") && j["rope_theta"].is_number()) return j["rope_theta"].get<float>();
  if (const json* r = rope_section(j); r && r->contains("rope_theta")) return (*r)["rope_theta"].get<float>();
  return 10000.0f;
}

Status int_field(const json& j, const char* key, const int* fallback, int* out);

Status parse_rope_scaling(const json& j, ModelConfig* c) {
  const json* section = rope_section(j);
  if (!section) return Status::ok();
  const json& r = *section;
  const std::string type = r.value("rope_type", r.value("type", std::string("default")));
  if (type == "default") return Status::ok();
  if (type != "llama3") {
    return invalid_argument("config.json: rope_scaling type '" + type +
                            "' is not supported (default and llama3 are)");
  }
  c->rope_scaling.enabled = true;
  c->rope_scaling.factor = r.value("factor", 8.0f);
  c->rope_scaling.low_freq_factor = r.value("low_freq_factor", 1.0f);
  c->rope_scaling.high_freq_factor = r.value("high_freq_factor", 4.0f);
  const int default_original = 8192;
  return int_field(r, "original_max_position_embeddings", &default_original,
                   &c->rope_scaling.original_max_position);
}

// An integer field of config.json: a float, a string or a value beyond int
// is an error naming the field (nlohmann's own conversion does not check,
// and a float beyond the type is undefined behaviour). Absent: `fallback`,
// or for required fields (no fallback) nlohmann's "key not found".
Status int_field(const json& j, const char* key, const int* fallback, int* out) {
  if (fallback && (!j.contains(key) || j[key].is_null())) {
    *out = *fallback;
    return Status::ok();
  }
  const json& v = j.at(key);
  if (!v.is_number_integer()) {
    return invalid_argument(std::string("config.json: ") + key + " must be an integer, got " + v.dump());
  }
  const bool huge = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT32_MAX);
  const int64_t x = huge ? int64_t(INT32_MAX) + 1 : v.get<int64_t>();
  if (x < INT32_MIN || x > INT32_MAX) {
    return invalid_argument(std::string("config.json: ") + key + " is out of range: " + v.dump());
  }
  *out = static_cast<int>(x);
  return Status::ok();
}

Status float_field(const json& j, const char* key, float fallback, float* out) {
  if (!j.contains(key) || j[key].is_null()) {
    *out = fallback;
    return Status::ok();
  }
  if (!j[key].is_number()) {
    return invalid_argument(std::string("config.json: ") + key + " must be a number, got " + j[key].dump());
  }
  *out = j[key].get<float>();
  return Status::ok();
}

// The mixture-of-experts fields, with transformers' defaults where a
// config.json leaves them out (Qwen3MoeConfig, MixtralConfig). validate()
// then bounds them.
Status parse_moe(const json& j, ModelConfig* c) {
  models::MoeConfig& m = c->moe;
  if (c->model_type == "mixtral") {
    const int experts = 8, top = 2;
    COHORT_RETURN_IF_ERROR(int_field(j, "num_local_experts", &experts, &m.experts));
    COHORT_RETURN_IF_ERROR(int_field(j, "num_experts_per_tok", &top, &m.experts_per_token));
    m.expert_intermediate = c->intermediate;  // Mixtral's experts are intermediate_size wide
    m.normalize_top_k = true;                 // and always renormalise their top-k weights
    float jitter = 0;
    COHORT_RETURN_IF_ERROR(float_field(j, "router_jitter_noise", 0.0f, &jitter));
    if (jitter != 0) {
      return invalid_argument("config.json: router_jitter_noise is " + j["router_jitter_noise"].dump() +
                              "; cohort routes without jitter (set it to 0)");
    }
    if (j.contains("sliding_window") && !j["sliding_window"].is_null()) {
      return invalid_argument("config.json: sliding_window is " + j["sliding_window"].dump() +
                              "; sliding-window attention is not supported (null is)");
    }
  } else {
    const int experts = 128, top = 8, size = 768, step = 1;
    // transformers 5 writes Qwen3-MoE's expert count as num_local_experts
    // (Mixtral's name); the published checkpoints say num_experts.
    const char* experts_key = !j.contains("num_experts") && j.contains("num_local_experts") ? "num_local_experts"
                                                                                           : "num_experts";
    COHORT_RETURN_IF_ERROR(int_field(j, experts_key, &experts, &m.experts));
    COHORT_RETURN_IF_ERROR(int_field(j, "num_experts_per_tok", &top, &m.experts_per_token));
    COHORT_RETURN_IF_ERROR(int_field(j, "moe_intermediate_size", &size, &m.expert_intermediate));
    COHORT_RETURN_IF_ERROR(bool_field(j, "norm_topk_prob", false, &m.normalize_top_k, "config.json: "));
    COHORT_RETURN_IF_ERROR(int_field(j, "decoder_sparse_step", &step, &m.sparse_step));
    if (j.contains("mlp_only_layers") && !j["mlp_only_layers"].is_null()) {
      const json& layers = j["mlp_only_layers"];
      if (!layers.is_array() || layers.size() > size_t(models::ModelLimits::kMaxLayers)) {
        return invalid_argument("config.json: mlp_only_layers must be a list of layer indices, got " +
                                layers.dump().substr(0, 80));
      }
      for (const json& layer : layers) {
        int index = 0;
        COHORT_RETURN_IF_ERROR(int_field(json{{"mlp_only_layers", layer}}, "mlp_only_layers", nullptr, &index));
        m.dense_layers.push_back(index);
      }
    }
  }
  COHORT_RETURN_IF_ERROR(bool_field(j, "output_router_logits", false, &m.aux_loss, "config.json: "));
  return float_field(j, "router_aux_loss_coef", 0.001f, &m.aux_loss_coef);
}

bool is_moe_type(const std::string& model_type) {
  return model_type == "qwen3_moe" || model_type == "mixtral";
}

const char* architecture(const std::string& model_type) {
  if (model_type == "qwen3") return "Qwen3ForCausalLM";
  if (model_type == "qwen2") return "Qwen2ForCausalLM";
  if (model_type == "qwen3_moe") return "Qwen3MoeForCausalLM";
  if (model_type == "mixtral") return "MixtralForCausalLM";
  return "LlamaForCausalLM";
}

}  // namespace

Result<ModelConfig> parse_config_json(const std::string& text, int max_seq_cap) {
  ModelConfig c;
  try {
    const json j = json::parse(text);
    c.model_type = j.at("model_type").get<std::string>();
    if (c.model_type != "qwen3" && c.model_type != "qwen2" && c.model_type != "llama" &&
        !is_moe_type(c.model_type)) {
      return invalid_argument("config.json: model_type '" + c.model_type +
                              "' is not supported (qwen3, qwen2, llama, qwen3_moe, mixtral are)");
    }
    if (j.value("hidden_act", std::string("silu")) != "silu") {
      return invalid_argument("config.json: hidden_act must be silu");
    }
    if (j.value("mlp_bias", false)) return invalid_argument("config.json: mlp_bias unsupported");
    if (j.value("use_sliding_window", false)) {
      return invalid_argument(
          "config.json: use_sliding_window is true; sliding-window attention "
          "is not supported");
    }
    COHORT_RETURN_IF_ERROR(int_field(j, "vocab_size", nullptr, &c.vocab_size));
    COHORT_RETURN_IF_ERROR(int_field(j, "hidden_size", nullptr, &c.hidden));
    COHORT_RETURN_IF_ERROR(int_field(j, "num_hidden_layers", nullptr, &c.layers));
    COHORT_RETURN_IF_ERROR(int_field(j, "num_attention_heads", nullptr, &c.heads));
    COHORT_RETURN_IF_ERROR(int_field(j, "num_key_value_heads", &c.heads, &c.kv_heads));
    const int derived_head_dim = c.heads > 0 ? c.hidden / c.heads : 0;
    COHORT_RETURN_IF_ERROR(int_field(j, "head_dim", &derived_head_dim, &c.head_dim));
    COHORT_RETURN_IF_ERROR(int_field(j, "intermediate_size", nullptr, &c.intermediate));
    c.rope_theta = parse_rope_theta(j);
    c.rms_eps = j.value("rms_norm_eps", 1e-6f);
    c.tie_embeddings = j.value("tie_word_embeddings", false);
    c.qk_norm = c.model_type == "qwen3" || c.model_type == "qwen3_moe";
    c.attention_bias = c.model_type == "qwen2" ? true : j.value("attention_bias", false);
    const int no_limit = 0;
    COHORT_RETURN_IF_ERROR(
        int_field(j, "max_position_embeddings", &no_limit, &c.max_position_embeddings));
    c.max_seq = c.max_position_embeddings > 0 ? std::min(c.max_position_embeddings, max_seq_cap)
                                              : max_seq_cap;
    COHORT_RETURN_IF_ERROR(parse_rope_scaling(j, &c));
    if (is_moe_type(c.model_type)) COHORT_RETURN_IF_ERROR(parse_moe(j, &c));
    // Quantized checkpoints: an unsupported method or variant is refused here,
    // before anything is loaded (hf/quantization_config.h).
    if (j.contains("quantization_config") && !j["quantization_config"].is_null()) {
      COHORT_RETURN_IF_ERROR(status_of(parse_quantization_config(j["quantization_config"])));
    }
  } catch (const json::exception& e) {
    return invalid_argument(std::string("config.json: ") + e.what());
  }
  COHORT_RETURN_IF_ERROR(c.validate().with_context("config.json"));
  return c;
}

Result<ModelConfig> load_config_json(const std::string& path, int max_seq_cap) {
  namespace fs = std::filesystem;
  const fs::path file = fs::is_directory(path) ? fs::path(path) / "config.json" : fs::path(path);
  std::ifstream in(file);
  if (!in) return not_found("cannot read " + file.string());
  std::stringstream ss;
  ss << in.rdbuf();
  auto config = parse_config_json(ss.str(), max_seq_cap);
  if (!config.is_ok()) return config.status().with_context(file.string());
  return config;
}

std::string config_json_text(const ModelConfig& c, DType dtype) {
  json j = {{"architectures", {architecture(c.model_type)}},
            {"model_type", c.model_type},
            {"vocab_size", c.vocab_size},
            {"hidden_size", c.hidden},
            {"num_hidden_layers", c.layers},
            {"num_attention_heads", c.heads},
            {"num_key_value_heads", c.kv_heads},
            {"head_dim", c.head_dim},
            {"intermediate_size", c.intermediate},
            {"rope_theta", c.rope_theta},
            {"rms_norm_eps", c.rms_eps},
            {"tie_word_embeddings", c.tie_embeddings},
            {"max_position_embeddings",
             c.max_position_embeddings > 0 ? c.max_position_embeddings : c.max_seq},
            {"hidden_act", "silu"},
            {"attention_bias", c.attention_bias},
            {"torch_dtype", dtype == DType::kF32   ? "float32"
                            : dtype == DType::kF16 ? "float16"
                                                   : "bfloat16"}};
  if (c.rope_scaling.enabled) {
    j["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", c.rope_scaling.factor},
        {"low_freq_factor", c.rope_scaling.low_freq_factor},
        {"high_freq_factor", c.rope_scaling.high_freq_factor},
        {"original_max_position_embeddings", c.rope_scaling.original_max_position}};
  }
  if (c.model_type == "mixtral") {
    j["num_local_experts"] = c.moe.experts;
    j["router_jitter_noise"] = 0.0;
    j["sliding_window"] = nullptr;
  } else if (c.model_type == "qwen3_moe") {
    j["num_experts"] = c.moe.experts;
    j["moe_intermediate_size"] = c.moe.expert_intermediate;
    j["norm_topk_prob"] = c.moe.normalize_top_k;
    j["decoder_sparse_step"] = c.moe.sparse_step;
    j["mlp_only_layers"] = c.moe.dense_layers;
    j["use_sliding_window"] = false;
  }
  if (is_moe_type(c.model_type)) {
    j["num_experts_per_tok"] = c.moe.experts_per_token;
    j["output_router_logits"] = c.moe.aux_loss;
    j["router_aux_loss_coef"] = c.moe.aux_loss_coef;
  }
  return j.dump(2) + "\n";
}

Status write_config_json(const std::string& dir, const ModelConfig& config, DType dtype) {
  return write_file_atomically((std::filesystem::path(dir) / "config.json").string(), config_json_text(config, dtype));
}

}  // namespace cohort::hf
