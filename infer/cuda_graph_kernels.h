// The fused kernels of the bf16 decode engine (infer_cuda_engine.h), callable
// from plain C++. Layouts are row-major; "rows" are tokens (a prefill's
// positions, or one token per sequence in a decode step). The residual stream
// and every reduction stay fp32; matrices, GEMM inputs and the KV cache are
// bf16 (uint16_t here, __nv_bfloat16 on the device); norm weights and biases
// are small and stay fp32. All launch on `stream`
// and never allocate, so a decode step can be captured in a CUDA graph.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace cohort::infer::cuda {

using bf16 = uint16_t;

// Per-row indices of a step, on the device: the cache slot and the position
// each row writes and attends up to (inclusive).
struct RowIndex {
  const int32_t* tokens;
  const int32_t* slots;
  const int32_t* positions;
};

// x[r] = table[tokens[r] - vocab_begin] for ids inside this rank's vocab
// rows, else zeros (the tensor-parallel all-reduce fills them in).
void embed(float* x, const bf16* table, RowIndex rows, int n, int hidden, int vocab_begin,
           int vocab_rows, cudaStream_t stream);

// If delta: x += delta. Then out = rmsnorm(x) * w in bf16.
void add_rmsnorm(float* x, const float* delta, const float* w, bf16* out, int n, int hidden,
                 float eps, cudaStream_t stream);

// qkv: [n, (hq + 2 hkv) * D] fp32 from the fused projection. Adds the bias
// (qkv_bias may be null), applies the per-head q/k RMSNorm (norm weights may
// be null), rotates q and k by RoPE at each row's position, writes q to
// q_out [n, hq * D] fp32 and k, v into the cache at (slot, position).
// Cache layout per layer: [slots, hkv, capacity, D].
struct QkvShape {
  int hq, hkv, head_dim, capacity;
  float eps;
};
void qkv_rope_cache(const float* qkv, const float* qkv_bias, const float* q_norm, const float* k_norm,
                    const float* rope_cos, const float* rope_sin, RowIndex rows, int n,
                    const QkvShape& shape, float* q_out, bf16* k_cache, bf16* v_cache,
                    cudaStream_t stream);

// Attention of each row's query over its slot's cache positions
// [0, position]: y [n, hq * D] bf16. Online softmax in fp32; head_dim must be
// a multiple of 16 and at most 512.
void cached_attention(const float* q, const bf16* k_cache, const bf16* v_cache, RowIndex rows,
                      int n, const QkvShape& shape, bf16* y, cudaStream_t stream);

// gate_up: [n, 2I] fp32 (gate columns first) -> h [n, I] = silu(gate) * up, bf16.
void swiglu(const float* gate_up, bf16* h, int n, int intermediate, cudaStream_t stream);

// Per row of logits [n, vocab_rows]: the largest value and its global index
// (lowest on ties) as (value, index bits) float pairs in out [n, 2].
void row_argmax(const float* logits, int n, int vocab_rows, int vocab_begin, float* out,
                cudaStream_t stream);
// gathered [tp, n, 2] from every rank -> tokens [n]; the lowest global index
// wins ties, as torch.argmax does.
void merge_argmax(const float* gathered, int tp, int n, int32_t* tokens, cudaStream_t stream);

// dst [k, hidden] = src rows idx[0..k) (the last position of each prompt of
// a packed prefill, for the LM head).
void gather_rows(const bf16* src, const int32_t* idx, bf16* dst, int k, int hidden,
                 cudaStream_t stream);

// fp32 -> bf16, round to nearest even.
void to_bf16(const float* src, bf16* dst, size_t n, cudaStream_t stream);

}  // namespace cohort::infer::cuda
