// Causal self-attention with grouped-query heads (CPU fp32 reference; CUDA in
// attention.cuh). The GEMM + softmax formulation: scores and probabilities are
// materialised per (batch, head), which is simple and exact; a fused
// flash-style kernel belongs to the performance work.
//
// Layouts (token-major, as the projections produce them):
//   q, y:  [B*T, heads*D]      k, v: [B*T, kv_heads*D]
//   probs: [B, heads, T, T]    (saved by forward for backward; zero above the diagonal)
// Query head h reads KV head h / (heads / kv_heads). Scale is 1/sqrt(D).
// Backward accumulates (+=) into dq, dk, dv; `scratch` holds heads*T*T floats
// (the CPU reference uses T*T of it, the CUDA kernels batch over heads).
//
// attention_cached serves inference: new tokens of one sequence attend to a
// KV cache [kv_heads, cache_len, D] that already holds their own keys/values.
#pragma once

namespace cohort::models::cpu {

void attention_forward(float* y, float* probs, const float* q, const float* k, const float* v,
                       int B, int T, int heads, int kv_heads, int head_dim);
void attention_backward(float* dq, float* dk, float* dv, float* scratch, const float* dy,
                        const float* q, const float* k, const float* v, const float* probs, int B,
                        int T, int heads, int kv_heads, int head_dim);

// y [m, heads*D] for m new tokens at positions first_pos .. first_pos+m-1;
// kcache/vcache point at one sequence's [kv_heads, capacity, D] block.
// scratch holds first_pos + m floats.
void attention_cached(float* y, float* scratch, const float* q, const float* kcache,
                      const float* vcache, int m, int first_pos, int capacity, int heads,
                      int kv_heads, int head_dim);

}  // namespace cohort::models::cpu

namespace cohort::models::cpu {

// Writes m tokens' keys or values src [m, kv_heads*D] into one sequence's
// cache block [kv_heads, capacity, D] at positions first_pos .. first_pos+m-1.
void kv_cache_write(float* cache, const float* src, int m, int first_pos, int capacity,
                    int kv_heads, int head_dim);

}  // namespace cohort::models::cpu
