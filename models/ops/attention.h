// Causal self-attention with grouped-query heads (CPU fp32 reference; CUDA in
// attention.cuh). The GEMM + softmax formulation, without keeping the T x T
// probabilities: forward saves each query's log-sum-exp of scaled scores, and
// backward recomputes the probabilities from q, k and it (one extra QK^T
// GEMM). Saved state per layer is then [B, heads, T] instead of
// [B, heads, T, T], so long sequences fit; a fused flash-style kernel belongs
// to the performance work.
//
// Layouts (token-major, as the projections produce them):
//   q, y:  [B*T, heads*D]      k, v: [B*T, kv_heads*D]
//   lse:   [B, heads, T]       (saved by forward for backward)
// Query head h reads KV head h / (heads / kv_heads). Scale is 1/sqrt(D).
// Backward accumulates (+=) into dq, dk, dv. `scratch` holds
// attention_scratch_floats(T, heads) floats (the CPU reference uses 2*T*T of
// it; the CUDA kernels batch over heads).
//
// attention_cached serves inference: new tokens of one sequence attend to a
// KV cache [kv_heads, cache_len, D] that already holds their own keys/values.
#pragma once

#include <cstddef>
#include <string_view>

namespace cohort::models {
// [model] attention, as transformers' attn_implementation: kMath is the GEMM
// + softmax path (the reference), kFlash the fused kernels
// (flash_attention.cuh), kCudnn cuDNN's fused attention inside the fused
// training blocks (models/cuda/cudnn_attention.h; the flash kernels serve
// the op-by-op path), kAuto cuDNN where it loads, else the fused kernels
// where they apply.
enum class AttentionBackend { kAuto, kCudnn, kFlash, kMath };
// The job file's names ("auto", "cudnn", "flash", "math"); anything else is
// kAuto (the schema has checked the name already).
inline AttentionBackend attention_backend_named(std::string_view name) {
  return name == "cudnn" ? AttentionBackend::kCudnn
         : name == "flash" ? AttentionBackend::kFlash
         : name == "math"  ? AttentionBackend::kMath
                           : AttentionBackend::kAuto;
}
inline size_t attention_scratch_floats(int T, int heads) {
  return 2 * static_cast<size_t>(heads) * T * T;
}
}  // namespace cohort::models

namespace cohort::models::cpu {

void attention_forward(float* y, float* lse, float* scratch, const float* q, const float* k,
                       const float* v, int B, int T, int heads, int kv_heads, int head_dim);
void attention_backward(float* dq, float* dk, float* dv, float* scratch, const float* dy,
                        const float* q, const float* k, const float* v, const float* lse, int B,
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
