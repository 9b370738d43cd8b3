// Causal grouped-query attention through cuDNN's fused flash attention
// (`[model] attention = "cudnn"`, and "auto" where the library is there),
// on the fused training blocks' bf16 layout: q, k and v read in place from
// rows of stride ld_qkv, gradients written (not added) into rows of the
// same stride, y and dy of stride ld_y. The log-sum-exp it saves is the
// flash kernels' ([B, heads, T] fp32, natural log of the scaled scores), so
// either backward can follow either forward.
//
// The graphs are the ones cuDNN's fused attention engines recognise: QK^T,
// scale, a causal mask (row index >= column index), softmax with its
// statistics, then P·V; backward recomputes P from the statistics and
// yields dQ (through an fp32 accumulator), dK and dV (summed over each
// group of query heads). Plans are built once per shape and kept.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace cohort::models::cuda {

struct CudnnAttentionShape {
  int B = 0, T = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t ld_qkv = 0;  // row stride, in elements, of q, k, v, dq, dk and dv
  int64_t ld_y = 0;    // row stride of y and dy
  bool operator==(const CudnnAttentionShape& o) const {
    return B == o.B && T == o.T && heads == o.heads && kv_heads == o.kv_heads &&
           head_dim == o.head_dim && ld_qkv == o.ld_qkv && ld_y == o.ld_y;
  }
};

// Ok when the cuDNN library loads (and is 9.0 or newer); the reason if not.
Status cudnn_attention_available();

class CudnnAttention {
 public:
  // Loads cuDNN and makes a handle on the current device; an error says
  // why not (no library, too old, no device).
  static Result<std::unique_ptr<CudnnAttention>> create();
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Builds the forward and backward plans for this shape, once; an error
  // (kept, so asking again is cheap) when cuDNN has no engine for it.
  Status prepare(const CudnnAttentionShape& s);
  // Device workspace, in bytes, that forward and backward need for a
  // prepared shape (the plans' own plus backward's fp32 accumulators).
  size_t workspace_bytes(const CudnnAttentionShape& s) const;

  Status forward(cudaStream_t stream, const CudnnAttentionShape& s, void* y, float* lse,
                 const void* q, const void* k, const void* v, void* workspace);
  Status backward(cudaStream_t stream, const CudnnAttentionShape& s, void* dq, void* dk, void* dv,
                  const void* dy, const void* q, const void* k, const void* v, const void* y,
                  const float* lse, void* workspace);

  // "cuDNN 91900" and the engines chosen, for logs.
  std::string describe() const;

 private:
  struct Plans;
  explicit CudnnAttention(void* handle);
  const Plans* find(const CudnnAttentionShape& s) const;

  void* handle_;  // cudnnHandle_t
  std::vector<std::unique_ptr<Plans>> plans_;
};

}  // namespace cohort::models::cuda
