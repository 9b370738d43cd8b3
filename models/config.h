// Model configuration (the Llama / Qwen2 / Qwen3 decoder family, and its
// mixture-of-experts members Qwen3-MoE and Mixtral), presets, and the
// tensor-parallel shard a rank builds.
//
// A ModelConfig always describes the *global* model. A ShardSpec{tp_rank,
// tp_size} says which slice of it this rank holds; LocalDims turns the pair
// into the per-rank sizes every buffer is allocated with:
//   - query heads split evenly; KV heads split evenly when kv_heads >= tp_size,
//     otherwise each rank holds (a replica of) the one KV head its query heads use;
//   - the MLP intermediate dimension split evenly (gate/up rows, down columns),
//     and so each expert's intermediate dimension; the router is replicated;
//   - the vocabulary split evenly (embedding rows, LM head rows);
//   - norms replicated.
// Sizes that do not divide are a configuration error (validate() says which).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace cohort::models {

// Llama 3's frequency-dependent RoPE rescaling (HF rope_type "llama3").
struct RopeScaling {
  bool enabled = false;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position = 8192;
};

// What a model config may declare, checked by validate() before any buffer
// is sized from it (each well above the largest open models: Llama 3.1
// 405B has hidden 16384, 126 layers, 128 heads, vocab 128256).
struct ModelLimits {
  static constexpr int64_t kMaxVocab = int64_t{1} << 21;   // token ids tokenizer.json may hold
  static constexpr int64_t kMaxHidden = 65536;             // hidden_size, and heads * head_dim
  static constexpr int64_t kMaxLayers = 1024;
  static constexpr int64_t kMaxHeads = 1024;
  static constexpr int64_t kMaxHeadDim = 1024;
  static constexpr int64_t kMaxIntermediate = 1 << 20;
  static constexpr int64_t kMaxSeq = 1 << 20;              // RoPE table positions
  static constexpr int64_t kMaxParameters = int64_t{4} << 40;  // 4.4e12
  static constexpr int64_t kMaxExperts = 4096;             // the largest open MoE has 512
};

// A mixture-of-experts MLP (HF qwen3_moe, mixtral): a router picks
// experts_per_token of `experts` SwiGLU MLPs per token, softmax over all
// experts, then the top k; their outputs are summed weighted by those
// probabilities, renormalised to sum to one when normalize_top_k (mixtral
// always, qwen3_moe per norm_topk_prob), as transformers' Qwen3MoeSparseMoeBlock
// and MixtralSparseMoeBlock route. experts == 0 is a dense model.
struct MoeConfig {
  int experts = 0;              // num_experts (qwen3_moe), num_local_experts (mixtral)
  int experts_per_token = 0;    // num_experts_per_tok
  int expert_intermediate = 0;  // moe_intermediate_size (mixtral: intermediate_size)
  bool normalize_top_k = false; // norm_topk_prob
  // Layer l is sparse when it is not in dense_layers and (l + 1) is a
  // multiple of sparse_step (qwen3_moe's decoder_sparse_step, mlp_only_layers);
  // the others keep the dense MLP of ModelConfig::intermediate.
  int sparse_step = 1;
  std::vector<int> dense_layers;
  // transformers adds aux_loss_coef * the load-balancing loss to the
  // training loss only when output_router_logits is true: so does cohort.
  bool aux_loss = false;        // output_router_logits
  float aux_loss_coef = 0.001f; // router_aux_loss_coef
};

struct ModelConfig {
  std::string model_type = "qwen3";  // qwen3, qwen2, llama, qwen3_moe or mixtral (HF model_type)
  int vocab_size = 256;
  int hidden = 64;
  int layers = 2;
  int heads = 8;
  int kv_heads = 4;
  int head_dim = 16;
  int intermediate = 128;
  float rope_theta = 10000.0f;
  float rms_eps = 1e-6f;
  bool tie_embeddings = false;
  bool qk_norm = true;              // Qwen3: per-head RMSNorm on q and k before RoPE
  bool attention_bias = false;      // Qwen2: biases on q/k/v projections
  int max_seq = 128;                // positions the RoPE table (and KV cache) cover
  int max_position_embeddings = 0;  // HF's value when loaded from HF (0: max_seq), written back
  RopeScaling rope_scaling;
  MoeConfig moe;

  bool is_moe() const { return moe.experts > 0; }
  // Whether layer `layer`'s MLP is the mixture of experts (MoeConfig).
  bool is_moe_layer(int layer) const;
  int q_dim() const { return heads * head_dim; }
  int kv_dim() const { return kv_heads * head_dim; }
  // Non-empty error naming the first inconsistent field.
  Status validate() const;
  // Parameters of the global (unsharded) model.
  int64_t num_parameters() const;
  // Parameters one token's forward reads: only experts_per_token of a
  // sparse layer's experts (what a FLOP count and a decode bound use).
  int64_t num_active_parameters() const;
};

// Presets: "tiny" and "tiny-moe" (CPU tests), "qwen3-0.6b", "qwen3-1.7b",
// "llama-3.2-1b", "qwen3-30b-a3b" (the HF config.json values of those
// checkpoints; max_seq is capped at 4096 so RoPE tables stay small; raise it
// for longer contexts), and "qwen3-moe-2.4b-a0.6b": a Qwen3-MoE shape that
// full fine-tuning fits on one GPU (Qwen3-0.6B's attention, 28 layers of 64
// experts of 384, top 8), the MoE training benchmark's.
Result<ModelConfig> preset_config(const std::string& name);

struct ShardSpec {
  int tp_rank = 0;
  int tp_size = 1;
  // Expert parallelism: this rank holds experts [ep_rank, ep_rank + 1) ×
  // experts / ep_size of every sparse layer (model.h).
  int ep_rank = 0;
  int ep_size = 1;
};

// Per-rank sizes for a config under a shard.
struct LocalDims {
  int heads = 0;               // query heads on this rank
  int kv_heads = 0;            // KV heads on this rank
  int head_begin = 0;          // first global query head
  int kv_head_begin = 0;       // first global KV head
  bool kv_replicated = false;  // true when tp_size > kv_heads
  int intermediate = 0;
  int intermediate_begin = 0;
  int expert_intermediate = 0;  // each expert's, on this rank
  int expert_intermediate_begin = 0;
  int experts = 0;              // experts on this rank (all of them without expert parallelism)
  int expert_begin = 0;         // the first one's global index
  int vocab = 0;
  int vocab_begin = 0;
  int q_dim() const;
  int kv_dim() const;
  int head_dim = 0;
};

// Errors when the config does not split evenly across tp_size (and its
// experts across ep_size).
Result<LocalDims> local_dims(const ModelConfig& config, const ShardSpec& shard);

}  // namespace cohort::models
