// Rotary position embeddings as Hugging Face applies them (rotate-half):
//   for i < D/2, with (c, s) = (cos, sin)(pos * inv_freq[i]):
//     out[i]       = x[i] * c - x[i + D/2] * s
//     out[i + D/2] = x[i + D/2] * c + x[i] * s
// inv_freq[i] = 1 / theta^(2i/D), optionally rescaled the Llama 3 way. Angles
// are computed in fp32 exactly as HF does (fp32 inv_freq times fp32 position)
// so logits match transformers closely. Applied in place to q [n, heads*D] or
// k [n, kv_heads*D]; backward is the inverse rotation, also in place (RoPE is
// linear and orthogonal, so it needs no saved activations).
//
// qkv_rope_cache is the bf16 decode engine's step between the fused q|k|v
// projection and attention: bias, the per-head q/k RMSNorm (rmsnorm.h),
// RoPE at each row's position, q out and k, v into the cache (the layout of
// decode_rows.h). Its CPU reference composes the ops named.
#pragma once

#include <cstdint>
#include <vector>

#include "models/config.h"
#include "models/ops/decode_rows.h"

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

// qkv [n, (hq + 2 hkv) * D] from the fused projection; qkv_bias [(hq + 2 hkv)
// * D] and the norm weights [D] may be null. q_out [n, hq * D]; k_cache and
// v_cache in either layout of decode_rows.h, row r written at (slots[r],
// positions[r]). cos/sin: a RopeTable's.
void qkv_rope_cache(float* q_out, float* k_cache, float* v_cache, const float* qkv,
                    const float* qkv_bias, const float* q_norm, const float* k_norm,
                    const float* cos, const float* sin, DecodeRows rows, int n,
                    const DecodeShape& shape);

}  // namespace cohort::models::cpu

// CUDA launchers (rope.cuh): device pointers, on `stream`, no allocation;
// the cache is bf16 or (the KvView form) fp8 (kv_fp8.h), q_out fp32.
namespace cohort::models::cuda {

// `cache.amax`, where given, is raised to each KV head's largest |value|
// written (before rounding), for the fp8 scales' calibration.
void qkv_rope_cache(float* q_out, const KvView& cache, const float* qkv, const float* qkv_bias,
                    const float* q_norm, const float* k_norm, const float* cos, const float* sin,
                    DecodeRows rows, int n, const DecodeShape& shape, CUstream_st* stream);

void qkv_rope_cache(float* q_out, Bf16Bits* k_cache, Bf16Bits* v_cache, const float* qkv,
                    const float* qkv_bias, const float* q_norm, const float* k_norm,
                    const float* cos, const float* sin, DecodeRows rows, int n,
                    const DecodeShape& shape, CUstream_st* stream);

}  // namespace cohort::models::cuda
