// Config validation, presets and per-rank dimensions.
#include "models/config.h"

#include <string>

namespace cohort::models {
namespace {

Status positive(const char* field, int64_t value) {
  if (value > 0) return Status::ok();
  return invalid_argument(std::string("model config: ") + field + " must be > 0, got " +
                          std::to_string(value));
}

// At most `limit`: sizes from a model folder are checked before anything
// is sized by them (a hidden_size of 1e9 would otherwise be a 2 TB
// allocation, and products of fields could wrap).
Status at_most(const char* field, int64_t value, int64_t limit) {
  if (value <= limit) return Status::ok();
  return invalid_argument("model config: " + std::string(field) + " is " + std::to_string(value) +
                          ", beyond cohort's limit of " + std::to_string(limit));
}

Status divides(const char* what, int64_t n, const char* by_what, int64_t by) {
  if (by > 0 && n % by == 0) return Status::ok();
  return invalid_argument("model config: " + std::string(what) + " (" + std::to_string(n) +
                          ") is not divisible by " + by_what + " (" + std::to_string(by) + ")");
}

}  // namespace

Status ModelConfig::validate() const {
  COHORT_RETURN_IF_ERROR(positive("vocab_size", vocab_size));
  COHORT_RETURN_IF_ERROR(positive("hidden_size", hidden));
  COHORT_RETURN_IF_ERROR(positive("num_hidden_layers", layers));
  COHORT_RETURN_IF_ERROR(positive("num_attention_heads", heads));
  COHORT_RETURN_IF_ERROR(positive("num_key_value_heads", kv_heads));
  COHORT_RETURN_IF_ERROR(positive("head_dim", head_dim));
  COHORT_RETURN_IF_ERROR(positive("intermediate_size", intermediate));
  COHORT_RETURN_IF_ERROR(positive("max_seq", max_seq));
  COHORT_RETURN_IF_ERROR(at_most("vocab_size", vocab_size, ModelLimits::kMaxVocab));
  COHORT_RETURN_IF_ERROR(at_most("hidden_size", hidden, ModelLimits::kMaxHidden));
  COHORT_RETURN_IF_ERROR(at_most("num_hidden_layers", layers, ModelLimits::kMaxLayers));
  COHORT_RETURN_IF_ERROR(at_most("num_attention_heads", heads, ModelLimits::kMaxHeads));
  COHORT_RETURN_IF_ERROR(at_most("num_key_value_heads", kv_heads, heads));
  COHORT_RETURN_IF_ERROR(at_most("head_dim", head_dim, ModelLimits::kMaxHeadDim));
  COHORT_RETURN_IF_ERROR(at_most("num_attention_heads * head_dim", int64_t(heads) * head_dim, ModelLimits::kMaxHidden));
  COHORT_RETURN_IF_ERROR(at_most("intermediate_size", intermediate, ModelLimits::kMaxIntermediate));
  COHORT_RETURN_IF_ERROR(at_most("max_seq (max_position_embeddings or [model] max_seq)", max_seq, ModelLimits::kMaxSeq));
  COHORT_RETURN_IF_ERROR(at_most("parameters", num_parameters(), ModelLimits::kMaxParameters));
  COHORT_RETURN_IF_ERROR(divides("num_attention_heads", heads, "num_key_value_heads", kv_heads));
  if (head_dim % 2 != 0) return invalid_argument("model config: head_dim must be even for RoPE");
  if (!(rope_theta > 0)) return invalid_argument("model config: rope_theta must be > 0");
  if (!(rms_eps > 0)) return invalid_argument("model config: rms_norm_eps must be > 0");
  return Status::ok();
}

int64_t ModelConfig::num_parameters() const {
  const int64_t h = hidden;
  int64_t block = 2 * h + h * q_dim() + 2 * h * kv_dim() + q_dim() * h + 3 * h * intermediate;
  if (qk_norm) block += 2 * head_dim;
  if (attention_bias) block += q_dim() + 2 * kv_dim();
  int64_t total = block * layers + static_cast<int64_t>(vocab_size) * h + h;
  if (!tie_embeddings) total += static_cast<int64_t>(vocab_size) * h;
  return total;
}

Result<ModelConfig> preset_config(const std::string& name) {
  ModelConfig c;
  if (name == "tiny") return c;  // the defaults above: byte vocab, 2 layers, GQA 8/4
  if (name == "qwen3-0.6b" || name == "qwen3-1.7b") {
    c.model_type = "qwen3";
    c.vocab_size = 151936;
    c.hidden = name == "qwen3-0.6b" ? 1024 : 2048;
    c.layers = 28;
    c.heads = 16;
    c.kv_heads = 8;
    c.head_dim = 128;
    c.intermediate = name == "qwen3-0.6b" ? 3072 : 6144;
    c.rope_theta = 1000000.0f;
    c.rms_eps = 1e-6f;
    c.tie_embeddings = true;
    c.qk_norm = true;
    c.max_seq = 4096;
    c.max_position_embeddings = 40960;
    return c;
  }
  if (name == "llama-3.2-1b") {
    c.model_type = "llama";
    c.vocab_size = 128256;
    c.hidden = 2048;
    c.layers = 16;
    c.heads = 32;
    c.kv_heads = 8;
    c.head_dim = 64;
    c.intermediate = 8192;
    c.rope_theta = 500000.0f;
    c.rms_eps = 1e-5f;
    c.tie_embeddings = true;
    c.qk_norm = false;
    c.max_seq = 4096;
    c.max_position_embeddings = 131072;
    c.rope_scaling = RopeScaling{true, 32.0f, 1.0f, 4.0f, 8192};
    return c;
  }
  return invalid_argument("unknown model preset '" + name +
                          "' (known: tiny, qwen3-0.6b, qwen3-1.7b, llama-3.2-1b)");
}

int LocalDims::q_dim() const {
  return heads * head_dim;
}
int LocalDims::kv_dim() const {
  return kv_heads * head_dim;
}

Result<LocalDims> local_dims(const ModelConfig& c, const ShardSpec& shard) {
  COHORT_RETURN_IF_ERROR(c.validate());
  const int tp = shard.tp_size;
  if (tp < 1 || shard.tp_rank < 0 || shard.tp_rank >= tp) {
    return invalid_argument("shard: tp_rank " + std::to_string(shard.tp_rank) +
                            " is outside tp_size " + std::to_string(tp));
  }
  COHORT_RETURN_IF_ERROR(divides("num_attention_heads", c.heads, "tensor_parallel", tp));
  COHORT_RETURN_IF_ERROR(divides("intermediate_size", c.intermediate, "tensor_parallel", tp));
  COHORT_RETURN_IF_ERROR(divides("vocab_size", c.vocab_size, "tensor_parallel", tp));
  LocalDims d;
  d.head_dim = c.head_dim;
  d.heads = c.heads / tp;
  d.head_begin = shard.tp_rank * d.heads;
  if (c.kv_heads >= tp) {
    COHORT_RETURN_IF_ERROR(divides("num_key_value_heads", c.kv_heads, "tensor_parallel", tp));
    d.kv_heads = c.kv_heads / tp;
    d.kv_head_begin = shard.tp_rank * d.kv_heads;
  } else {
    // More ranks than KV heads: each rank's query heads must share one KV head.
    const int group = c.heads / c.kv_heads;
    COHORT_RETURN_IF_ERROR(
        divides("query heads per KV head", group, "query heads per rank", d.heads));
    d.kv_heads = 1;
    d.kv_head_begin = d.head_begin / group;
    d.kv_replicated = true;
  }
  d.intermediate = c.intermediate / tp;
  d.intermediate_begin = shard.tp_rank * d.intermediate;
  d.vocab = c.vocab_size / tp;
  d.vocab_begin = shard.tp_rank * d.vocab;
  return d;
}

}  // namespace cohort::models
