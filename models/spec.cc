// DecoderSpec and the executors' support table (see spec.h).
#include "models/spec.h"

#include <string>

namespace cohort::models {

// A field added to ModelConfig changes what a decoder may do: declare it
// as a SpecFeature (or as a size) before changing this number.
static_assert(sizeof(ModelConfig) == 160, "ModelConfig changed: update DecoderSpec (models/spec.h)");

const char* to_string(SpecFeature feature) {
  switch (feature) {
    case SpecFeature::kRmsNorm: return "rms_norm";
    case SpecFeature::kQkNorm: return "qk_norm";
    case SpecFeature::kAttentionBias: return "attention_bias";
    case SpecFeature::kGroupedQueryAttention: return "grouped_query_attention";
    case SpecFeature::kRope: return "rope";
    case SpecFeature::kRopeLlama3Scaling: return "rope_scaling llama3";
    case SpecFeature::kTiedEmbeddings: return "tie_word_embeddings";
    case SpecFeature::kSwiGluMlp: return "swiglu_mlp";
    case SpecFeature::kMoeMlp: return "moe_mlp";
  }
  return "?";
}

const char* to_string(Executor executor) {
  switch (executor) {
    case Executor::kCpuReference: return "the op-by-op reference ops";
    case Executor::kCudaTrainBlocks: return "the fused CUDA training blocks";
    case Executor::kCudaDecode: return "the bf16 CUDA decode engine's kernels";
  }
  return "?";
}

DecoderSpec DecoderSpec::of(const ModelConfig& c) {
  DecoderSpec s;
  s.norm_eps = c.rms_eps;
  s.qk_norm = c.qk_norm;
  s.attention_bias = c.attention_bias;
  s.grouped_query_attention = c.kv_heads < c.heads;
  s.rope_theta = c.rope_theta;
  s.rope_scaling = c.rope_scaling;
  s.tied_embeddings = c.tie_embeddings;
  s.moe_mlp = c.is_moe();
  return s;
}

bool DecoderSpec::uses(SpecFeature feature) const {
  switch (feature) {
    case SpecFeature::kRmsNorm:
    case SpecFeature::kRope:
    case SpecFeature::kSwiGluMlp: return true;  // every decoder of the family
    case SpecFeature::kQkNorm: return qk_norm;
    case SpecFeature::kAttentionBias: return attention_bias;
    case SpecFeature::kGroupedQueryAttention: return grouped_query_attention;
    case SpecFeature::kRopeLlama3Scaling: return rope_scaling.enabled;
    case SpecFeature::kTiedEmbeddings: return tied_embeddings;
    case SpecFeature::kMoeMlp: return moe_mlp;
  }
  return false;
}

std::vector<SpecFeature> DecoderSpec::features() const {
  std::vector<SpecFeature> used;
  for (SpecFeature f : kAllSpecFeatures) if (uses(f)) used.push_back(f);
  return used;
}

Support executor_support(Executor executor, SpecFeature feature) {
  switch (executor) {
    case Executor::kCpuReference:
      return Support::kRuns;  // the reference defines every feature
    case Executor::kCudaTrainBlocks:
      // The fused blocks' projections carry no bias; such models train on
      // the CUDA backend's op-by-op path. Sparse layers run in the blocks
      // (models/cuda/train_experts.cuh). RoPE variants differ only in the
      // shared table (ops/rope.h), the head and embeddings are outside the
      // blocks.
      return feature == SpecFeature::kAttentionBias ? Support::kOpByOp : Support::kRuns;
    case Executor::kCudaDecode:
      // Sparse layers run as models/ops/moe_experts.h's kernels.
      return Support::kRuns;
  }
  return Support::kRefused;
}

Support executor_support(Executor executor, const DecoderSpec& spec) {
  Support least = Support::kRuns;
  for (SpecFeature f : spec.features()) {
    const Support s = executor_support(executor, f);
    if (s == Support::kRefused) return s;
    if (s == Support::kOpByOp) least = s;
  }
  return least;
}

Status check_executor(Executor executor, const DecoderSpec& spec) {
  for (SpecFeature f : spec.features()) {
    if (executor_support(executor, f) != Support::kRuns) {
      return failed_precondition(std::string(to_string(executor)) + " lack " + to_string(f) +
                                 " (models/spec.h)");
    }
  }
  return Status::ok();
}

}  // namespace cohort::models
