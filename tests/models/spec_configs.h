// Tiny configs that switch one spec feature on (or off), shared by the
// spec × executor tests on CPU and GPU.
#pragma once

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "models/config.h"
#include "models/model.h"
#include "models/spec.h"

namespace cohort::testing {

// head_dim 64 so the fused CUDA blocks and the bf16 decode engine take the
// model; 2 layers, vocabulary 96. The baseline has every toggleable feature
// off.
inline models::ModelConfig spec_baseline_config() {
  models::ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = 96;
  c.hidden = 128;
  c.layers = 2;
  c.heads = 2;
  c.kv_heads = 2;
  c.head_dim = 64;
  c.intermediate = 192;
  c.max_seq = 64;
  c.qk_norm = false;
  c.attention_bias = false;
  c.tie_embeddings = false;
  return c;
}

// The baseline with `feature` on. For the features every decoder has
// (RMSNorm, RoPE, SwiGLU) "on" changes their parameter instead, so that a
// test can see the executor read it.
inline models::ModelConfig spec_config_with(models::SpecFeature feature) {
  using F = models::SpecFeature;
  models::ModelConfig c = spec_baseline_config();
  switch (feature) {
    case F::kRmsNorm: c.rms_eps = 0.5f; break;
    case F::kQkNorm: c.qk_norm = true; c.model_type = "qwen3"; break;
    case F::kAttentionBias: c.attention_bias = true; c.model_type = "qwen2"; break;
    case F::kGroupedQueryAttention: c.kv_heads = 1; break;
    case F::kRope: c.rope_theta = 100.0f; break;
    case F::kRopeLlama3Scaling:
      c.rope_scaling.enabled = true;
      c.rope_scaling.factor = 8.0f;
      c.rope_scaling.low_freq_factor = 1.0f;
      c.rope_scaling.high_freq_factor = 4.0f;
      c.rope_scaling.original_max_position = 16;
      break;
    case F::kTiedEmbeddings: c.tie_embeddings = true; break;
    case F::kSwiGluMlp: c.intermediate = 256; break;
    case F::kMoeMlp:
      // Every expert chosen (4 of 4): the GPU tests compare bf16 GEMMs with
      // the fp32 reference, and a top-k choice that flipped on rounding would
      // compare different experts. The choice itself is tested on the CPU
      // (moe_ops_test.cc, moe_test.cc) and op by op on the GPU
      // (moe_routing_gpu_test.cc).
      c.model_type = "qwen3_moe";
      c.moe = models::MoeConfig{4, 4, 96, true, 1, {}, false, 0.001f};
      break;
  }
  return c;
}

// Weights from `seed`, with every norm weight and bias drawn too (init
// leaves norms at 1 and biases at 0, which would hide a feature).
inline void init_spec_weights(models::Model& m, uint64_t seed) {
  m.init_weights(seed, 0.08f);
  std::mt19937 rng(static_cast<uint32_t>(seed) * 7 + 1);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (int g = 0; g < m.num_groups(); ++g) {
    for (const models::ParamSpec& p : m.layout().groups[g].params) {
      const bool is_norm = p.name.find("norm") != std::string::npos;
      const bool is_bias = p.name.find(".bias") != std::string::npos;
      if (!is_norm && !is_bias) continue;
      auto view = m.param_view(p.name);
      if (!view.is_ok()) continue;
      std::vector<float> host(view->numel());
      for (float& v : host) v = is_norm ? 1.0f + u(rng) : u(rng);
      m.backend().copy_from_host(view->data, host.data(), host.size() * sizeof(float));
    }
  }
}

inline std::vector<int32_t> spec_tokens(int n, int vocab) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 37 + 11) % vocab);
  return t;
}

}  // namespace cohort::testing
