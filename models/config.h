// Model configuration (the Llama / Qwen2 / Qwen3 decoder family), presets, and
// the tensor-parallel shard a rank builds.
//
// A ModelConfig always describes the *global* model. A ShardSpec{tp_rank,
// tp_size} says which slice of it this rank holds; LocalDims turns the pair
// into the per-rank sizes every buffer is allocated with:
//   - query heads split evenly; KV heads split evenly when kv_heads >= tp_size,
//     otherwise each rank holds (a replica of) the one KV head its query heads use;
//   - the MLP intermediate dimension split evenly (gate/up rows, down columns);
//   - the vocabulary split evenly (embedding rows, LM head rows);
//   - norms replicated.
// Sizes that do not divide are a configuration error (validate() says which).
#pragma once

#include <cstdint>
#include <string>

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
};

struct ModelConfig {
  std::string model_type = "qwen3";  // qwen3, qwen2 or llama (HF model_type)
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

  int q_dim() const { return heads * head_dim; }
  int kv_dim() const { return kv_heads * head_dim; }
  // Non-empty error naming the first inconsistent field.
  Status validate() const;
  // Parameters of the global (unsharded) model.
  int64_t num_parameters() const;
};

// Presets: "tiny" (CPU tests), "qwen3-0.6b", "qwen3-1.7b", "llama-3.2-1b"
// (the HF config.json values of those checkpoints; max_seq is capped at 4096
// so RoPE tables stay small; raise it for longer contexts).
Result<ModelConfig> preset_config(const std::string& name);

struct ShardSpec {
  int tp_rank = 0;
  int tp_size = 1;
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
  int vocab = 0;
  int vocab_begin = 0;
  int q_dim() const;
  int kv_dim() const;
  int head_dim = 0;
};

// Errors when the config does not split evenly across tp_size.
Result<LocalDims> local_dims(const ModelConfig& config, const ShardSpec& shard);

}  // namespace cohort::models
