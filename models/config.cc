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

// The MoE fields, under the names config.json gives them.
Status validate_moe(const ModelConfig& c) {
  const MoeConfig& m = c.moe;
  const bool mixtral = c.model_type == "mixtral";
  const char* experts_field = mixtral ? "num_local_experts" : "num_experts";
  if (m.experts == 0) {
    if (c.model_type == "qwen3_moe" || mixtral) {
      return invalid_argument("model config: " + c.model_type + " needs " + experts_field + " > 0");
    }
    return Status::ok();
  }
  if (c.model_type != "qwen3_moe" && !mixtral) {
    return invalid_argument("model config: " + std::string(experts_field) + " is " + std::to_string(m.experts) +
                            " but model_type '" + c.model_type + "' is dense (qwen3_moe and mixtral have experts)");
  }
  COHORT_RETURN_IF_ERROR(positive(experts_field, m.experts));
  COHORT_RETURN_IF_ERROR(at_most(experts_field, m.experts, ModelLimits::kMaxExperts));
  COHORT_RETURN_IF_ERROR(positive("num_experts_per_tok", m.experts_per_token));
  if (m.experts_per_token > m.experts) {
    return invalid_argument("model config: num_experts_per_tok (" + std::to_string(m.experts_per_token) +
                            ") exceeds " + experts_field + " (" + std::to_string(m.experts) + ")");
  }
  const char* size_field = mixtral ? "intermediate_size" : "moe_intermediate_size";
  COHORT_RETURN_IF_ERROR(positive(size_field, m.expert_intermediate));
  COHORT_RETURN_IF_ERROR(at_most(size_field, m.expert_intermediate, ModelLimits::kMaxIntermediate));
  COHORT_RETURN_IF_ERROR(positive("decoder_sparse_step", m.sparse_step));
  for (int l : m.dense_layers) {
    if (l < 0 || l >= c.layers) {
      return invalid_argument("model config: mlp_only_layers holds layer " + std::to_string(l) +
                              ", outside num_hidden_layers (" + std::to_string(c.layers) + ")");
    }
  }
  if (!(m.aux_loss_coef >= 0) || m.aux_loss_coef > 1e6f) {
    return invalid_argument("model config: router_aux_loss_coef must be finite and >= 0, got " +
                            std::to_string(m.aux_loss_coef));
  }
  if (mixtral && (m.sparse_step != 1 || !m.dense_layers.empty() || !m.normalize_top_k ||
                  c.intermediate != m.expert_intermediate)) {
    // Mixtral's every layer is sparse, its top-2 weights renormalised, its
    // experts as wide as intermediate_size: anything else is not Mixtral.
    return invalid_argument("model config: mixtral has a sparse MLP in every layer with renormalised "
                            "top-k weights and experts of intermediate_size; a config that says "
                            "otherwise (decoder_sparse_step, mlp_only_layers, norm_topk_prob, "
                            "moe_intermediate_size) is not mixtral");
  }
  return Status::ok();
}

}  // namespace

bool ModelConfig::is_moe_layer(int layer) const {
  if (moe.experts <= 0 || moe.sparse_step <= 0) return false;
  for (int l : moe.dense_layers) {
    if (l == layer) return false;
  }
  return (layer + 1) % moe.sparse_step == 0;
}

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
  COHORT_RETURN_IF_ERROR(validate_moe(*this));
  COHORT_RETURN_IF_ERROR(at_most("parameters", num_parameters(), ModelLimits::kMaxParameters));
  COHORT_RETURN_IF_ERROR(divides("num_attention_heads", heads, "num_key_value_heads", kv_heads));
  if (head_dim % 2 != 0) return invalid_argument("model config: head_dim must be even for RoPE");
  if (!(rope_theta > 0)) return invalid_argument("model config: rope_theta must be > 0");
  if (!(rms_eps > 0)) return invalid_argument("model config: rms_norm_eps must be > 0");
  return Status::ok();
}

namespace {

// Parameters of the model when a sparse layer reads `experts_read` of its
// experts (all of them: the model's size; experts_per_token: one token's).
// Every factor is bounded by ModelLimits before this is called from
// validate(), so no product wraps.
int64_t parameters_reading(const ModelConfig& c, int64_t experts_read) {
  const int64_t h = c.hidden;
  int64_t attention = 2 * h + h * c.q_dim() + 2 * h * c.kv_dim() + c.q_dim() * h;
  if (c.qk_norm) attention += 2 * c.head_dim;
  if (c.attention_bias) attention += c.q_dim() + 2 * c.kv_dim();
  const int64_t dense_mlp = 3 * h * c.intermediate;
  const int64_t sparse_mlp = c.moe.experts * h + experts_read * 3 * h * c.moe.expert_intermediate;
  int64_t total = static_cast<int64_t>(c.vocab_size) * h + h;
  if (!c.tie_embeddings) total += static_cast<int64_t>(c.vocab_size) * h;
  for (int l = 0; l < c.layers; ++l) total += attention + (c.is_moe_layer(l) ? sparse_mlp : dense_mlp);
  return total;
}

}  // namespace

int64_t ModelConfig::num_parameters() const {
  return parameters_reading(*this, moe.experts);
}

int64_t ModelConfig::num_active_parameters() const {
  return parameters_reading(*this, moe.experts_per_token);
}

Result<ModelConfig> preset_config(const std::string& name) {
  ModelConfig c;
  if (name == "tiny") return c;  // the defaults above: byte vocab, 2 layers, GQA 8/4
  if (name == "tiny-moe") {
    // tiny's attention, 8 experts of 32, top 2, with the load-balancing loss.
    c.model_type = "qwen3_moe";
    c.moe = MoeConfig{8, 2, 32, true, 1, {}, true, 0.01f};
    return c;
  }
  if (name == "qwen3-moe-2.4b-a0.6b" || name == "qwen3-30b-a3b") {
    const bool small = name == "qwen3-moe-2.4b-a0.6b";
    c.model_type = "qwen3_moe";
    c.vocab_size = 151936;
    c.hidden = small ? 1024 : 2048;
    c.layers = small ? 28 : 48;
    c.heads = small ? 16 : 32;
    c.kv_heads = small ? 8 : 4;
    c.head_dim = 128;
    c.intermediate = small ? 3072 : 6144;  // mlp_only_layers' (none here)
    c.rope_theta = 1000000.0f;
    c.rms_eps = 1e-6f;
    c.tie_embeddings = small;
    c.qk_norm = true;
    c.max_seq = 4096;
    c.max_position_embeddings = 40960;
    c.moe = MoeConfig{small ? 64 : 128, 8, small ? 384 : 768, true, 1, {}, false, 0.001f};
    return c;
  }
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
  if (name == "llama-3.1-8b" || name == "llama-3.1-70b") {
    // Llama 3.1's published shapes (config.json of meta-llama/Llama-3.1-8B
    // and -70B): the LoRA / QLoRA benchmarks' models, seeded at random.
    const bool big = name == "llama-3.1-70b";
    c.model_type = "llama";
    c.vocab_size = 128256;
    c.hidden = big ? 8192 : 4096;
    c.layers = big ? 80 : 32;
    c.heads = big ? 64 : 32;
    c.kv_heads = 8;
    c.head_dim = 128;
    c.intermediate = big ? 28672 : 14336;
    c.rope_theta = 500000.0f;
    c.rms_eps = 1e-5f;
    c.tie_embeddings = false;
    c.qk_norm = false;
    c.max_seq = 4096;
    c.max_position_embeddings = 131072;
    c.rope_scaling = RopeScaling{true, 8.0f, 1.0f, 4.0f, 8192};
    return c;
  }
  return invalid_argument("unknown model preset '" + name +
                          "' (known: tiny, tiny-moe, qwen3-0.6b, qwen3-1.7b, llama-3.2-1b, llama-3.1-8b, "
                          "llama-3.1-70b, qwen3-moe-2.4b-a0.6b, qwen3-30b-a3b)");
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
  if (shard.ep_size < 1 || shard.ep_rank < 0 || shard.ep_rank >= shard.ep_size) {
    return invalid_argument("shard: ep_rank " + std::to_string(shard.ep_rank) + " is outside ep_size " +
                            std::to_string(shard.ep_size));
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
  if (c.is_moe()) {
    // Each expert splits like the dense MLP (model.h, tensor parallelism).
    COHORT_RETURN_IF_ERROR(divides(c.model_type == "mixtral" ? "intermediate_size" : "moe_intermediate_size",
                                   c.moe.expert_intermediate, "tensor_parallel", tp));
    d.expert_intermediate = c.moe.expert_intermediate / tp;
    d.expert_intermediate_begin = shard.tp_rank * d.expert_intermediate;
    COHORT_RETURN_IF_ERROR(divides(c.model_type == "mixtral" ? "num_local_experts" : "num_experts", c.moe.experts,
                                   "expert_parallel", shard.ep_size));
    d.experts = c.moe.experts / shard.ep_size;
    d.expert_begin = shard.ep_rank * d.experts;
  } else if (shard.ep_size > 1) {
    return invalid_argument("expert_parallel " + std::to_string(shard.ep_size) + " needs a mixture-of-experts model; " +
                            c.model_type + " is dense");
  }
  d.vocab = c.vocab_size / tp;
  d.vocab_begin = shard.tp_rank * d.vocab;
  return d;
}

}  // namespace cohort::models
