// The row vocabulary of the bf16 decode kernels (the CUDA-graph engine,
// infer/cuda_graph_engine.h), shared by their CPU references and launchers.
//
// A "row" is one token: a prefill's positions, or one token per sequence in
// a decode step. Each row carries the token id, the KV-cache slot it writes
// and the position it writes and attends up to (inclusive). The KV cache is
// bf16, per layer [slots, kv_heads, capacity, head_dim]; its CPU references
// take the same layout in fp32. bf16 values travel as their bits (uint16_t)
// on the host side; kernels read them as __nv_bfloat16.
#pragma once

#include <cstdint>

// cudaStream_t without CUDA's headers, so plain C++ can call the launchers.
struct CUstream_st;

namespace cohort::models {

using Bf16Bits = uint16_t;

// Per-row indices, each an array of n int32 (device memory for the CUDA
// launchers, host memory for the CPU references).
struct DecodeRows {
  const int32_t* tokens = nullptr;
  const int32_t* slots = nullptr;
  const int32_t* positions = nullptr;
};

// Head layout of a fused q|k|v projection and of the cache.
struct DecodeShape {
  int hq = 0, hkv = 0, head_dim = 0, capacity = 0;
  float eps = 1e-6f;  // of the per-head q/k RMSNorm
};

}  // namespace cohort::models
