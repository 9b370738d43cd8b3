// The row vocabulary of the bf16 decode kernels (the CUDA-graph engine,
// models/decode/cuda_graph_engine.h), shared by their CPU references and launchers.
//
// A "row" is one token: a prefill's positions, or one token per sequence in
// a decode step. Each row carries the token id, the KV-cache slot it writes
// and the position it writes and attends up to (inclusive). The KV cache is
// bf16 or fp8 (KvView below, kv_fp8.h), per layer, in one of two layouts
// (its CPU references take the same in fp32):
//   contiguous  [slots, kv_heads, capacity, head_dim]: a slot owns its rows;
//   paged       [blocks, kv_heads, block_size, head_dim] with a block table
//               [slots, blocks_per_slot]: position p of a slot lives in
//               block table[slot][p / block_size], so sequences hold only
//               the blocks they fill and the cache is shared by need.
// bf16 values travel as their bits (uint16_t) on the host side; kernels read
// them as __nv_bfloat16.
#pragma once

#include <cstddef>
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
  // The paged layout's block table, [slots, blocks_per_slot(shape)] block
  // ids; null: the contiguous layout.
  const int32_t* block_table = nullptr;
};

// Head layout of a fused q|k|v projection and of the cache.
struct DecodeShape {
  int hq = 0, hkv = 0, head_dim = 0, capacity = 0;  // capacity: positions per slot
  float eps = 1e-6f;  // of the per-head q/k RMSNorm
  int block_shift = 0;  // paged layout: block_size = 1 << block_shift positions
};

#ifdef __CUDACC__
#define COHORT_HOST_DEVICE __host__ __device__
#else
#define COHORT_HOST_DEVICE
#endif

// One layer's K and V caches as the CUDA kernels take them: bf16, or with
// fp8_scales the fp8 form (kv_fp8.h): e4m3 bytes, value = code times the
// scale of its KV head, fp8_scales [2, hkv] on the device (K's, then V's).
// The layout and element offsets are the same in both (cache_offset).
// amax, where given ([2, hkv] floats, K's then V's, never negative), is
// raised by qkv_rope_cache to the largest |value| it writes to each head
// (the fp8 scales' calibration); the attention kernels ignore it.
struct KvView {
  void* k = nullptr;
  void* v = nullptr;
  const float* fp8_scales = nullptr;
  float* amax = nullptr;
  COHORT_HOST_DEVICE bool fp8() const { return fp8_scales != nullptr; }
};

COHORT_HOST_DEVICE inline int blocks_per_slot(const DecodeShape& s) {
  return (s.capacity + (1 << s.block_shift) - 1) >> s.block_shift;
}

// Offset of the head_dim values of (slot, kv head, position) in a layer's
// cache, in elements, for either layout.
COHORT_HOST_DEVICE inline size_t cache_offset(const DecodeRows& rows, const DecodeShape& s, int slot,
                                              int kv, int pos) {
  if (rows.block_table == nullptr) {
    return ((static_cast<size_t>(slot) * s.hkv + kv) * s.capacity + pos) * s.head_dim;
  }
  const int block = rows.block_table[static_cast<size_t>(slot) * blocks_per_slot(s) + (pos >> s.block_shift)];
  const int within = pos & ((1 << s.block_shift) - 1);
  return ((static_cast<size_t>(block) * s.hkv + kv) * (size_t{1} << s.block_shift) + within) * s.head_dim;
}

}  // namespace cohort::models
