// The decoder's structure, declared once: a DecoderSpec is what a
// ModelConfig (from config.json or a preset) says the forward pass does,
// as features every executor reads.
//
// Executors are the code that runs a decoder: the reference (models::Model
// op by op on any backend, whose training forward and KV decode are one
// block routine, Model::block_forward), the
// fused CUDA training blocks (block_engine.h) and the bf16 CUDA decode
// engine (decode/). Each declares, per feature, whether it runs it, hands it
// to the op-by-op path, or refuses it; an executor refuses a model at load
// naming the feature it lacks (check_executor), so no feature is ever
// silently ignored. tests/models/spec_test.cc enumerates features ×
// executors; a feature added to the config must be added here (spec.cc
// checks that ModelConfig has not grown without it). LoRA adapters (lora.h)
// are no config feature but terms the reference's blocks add: the fused
// training blocks run them when they have no dropout (block_engine.h), and
// the decode engine serves them per row (ops/lora_rows.h) or merged.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "models/config.h"

namespace cohort::models {

enum class SpecFeature {
  kRmsNorm,               // pre-norm RMSNorm on the residual stream (rms_norm_eps)
  kQkNorm,                // Qwen3: per-head RMSNorm on q and k before RoPE
  kAttentionBias,         // Qwen2: biases on the q, k and v projections
  kGroupedQueryAttention, // fewer key/value heads than query heads
  kRope,                  // rotary positions (rope_theta)
  kRopeLlama3Scaling,     // Llama 3's frequency-dependent RoPE rescaling
  kTiedEmbeddings,        // the LM head is the embedding matrix
  kSwiGluMlp,             // down(silu(gate(x)) * up(x))
  kMoeMlp,                // Qwen3-MoE / Mixtral: a router's top-k of SwiGLU experts (config.h, MoeConfig)
};
inline constexpr SpecFeature kAllSpecFeatures[] = {
    SpecFeature::kRmsNorm, SpecFeature::kQkNorm,  SpecFeature::kAttentionBias,
    SpecFeature::kGroupedQueryAttention, SpecFeature::kRope, SpecFeature::kRopeLlama3Scaling,
    SpecFeature::kTiedEmbeddings, SpecFeature::kSwiGluMlp, SpecFeature::kMoeMlp};
// "qk_norm", "attention_bias", ...: as errors and logs name them.
const char* to_string(SpecFeature feature);

struct DecoderSpec {
  float norm_eps = 1e-6f;
  bool qk_norm = false;
  bool attention_bias = false;
  bool grouped_query_attention = false;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  bool tied_embeddings = false;
  bool moe_mlp = false;

  static DecoderSpec of(const ModelConfig& config);
  // The features this decoder uses, in kAllSpecFeatures order.
  std::vector<SpecFeature> features() const;
  bool uses(SpecFeature feature) const;
};

enum class Executor { kCpuReference, kCudaTrainBlocks, kCudaDecode };
inline constexpr Executor kAllExecutors[] = {Executor::kCpuReference, Executor::kCudaTrainBlocks,
                                             Executor::kCudaDecode};
const char* to_string(Executor executor);

enum class Support {
  kRuns,       // the executor computes the feature itself
  kOpByOp,     // the executor hands such a model to the CPU reference's op-by-op path
  kRefused,    // the executor refuses such a model at load
};
Support executor_support(Executor executor, SpecFeature feature);
// The least an executor does for a whole decoder: kRefused if it refuses
// any feature, else kOpByOp if it hands any over, else kRuns.
Support executor_support(Executor executor, const DecoderSpec& spec);

// Ok when `executor` runs every feature of `spec` itself; otherwise the
// first feature it does not, named ("the fused CUDA training blocks lack
// attention_bias (models/spec.h)").
Status check_executor(Executor executor, const DecoderSpec& spec);

}  // namespace cohort::models
