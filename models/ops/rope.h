// Rotary position embeddings as Hugging Face applies them (rotate-half):
//   for i < D/2, with (c, s) = (cos, sin)(pos * inv_freq[i]):
//     out[i]       = x[i] * c - x[i + D/2] * s
//     out[i + D/2] = x[i + D/2] * c + x[i] * s
// inv_freq[i] = 1 / theta^(2i/D), optionally rescaled the Llama 3 way. Angles
// are computed in fp32 exactly as HF does (fp32 inv_freq times fp32 position)
// so logits match transformers closely. Applied in place to q [n, heads*D] or
// k [n, kv_heads*D]; backward is the inverse rotation, also in place (RoPE is
// linear and orthogonal, so it needs no saved activations).
#pragma once

#include <cstdint>
#include <vector>

#include "models/config.h"

namespace cohort::models {

// cos and sin tables [max_seq, D/2], row p for position p.
struct RopeTable {
  int max_seq = 0;
  int half = 0;
  std::vector<float> cos;
  std::vector<float> sin;
};
RopeTable make_rope_table(const ModelConfig& config);
std::vector<float> rope_inv_freq(const ModelConfig& config);

}  // namespace cohort::models

namespace cohort::models::cpu {

void rope_forward(float* x, const int32_t* pos, int n, int heads, int head_dim, const float* cos,
                  const float* sin);
void rope_backward(float* dx, const int32_t* pos, int n, int heads, int head_dim, const float* cos,
                   const float* sin);

}  // namespace cohort::models::cpu
