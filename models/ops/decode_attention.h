// Attention of decode rows over a bf16 KV cache: the bf16 decode engine's
// attention (CPU fp32 reference here and in decode_attention.cc; CUDA in
// decode_attention.cuh).
//
// Each row's query q [n, hq * D] attends over its slot's cache positions
// [0, positions[r]] (grouped-query: head h reads KV head h / (hq / hkv)),
// scale 1/sqrt(D); y [n, hq * D]. Rows are independent, so a packed prefill
// (several prompts, each row at its own position) and a decode step are the
// same call. The reference is attention_cached (attention.h) one row at a
// time; the kernel keeps an online softmax in fp32 and writes y in bf16.
// Cache layout: decode_rows.h.
#pragma once

#include <string_view>

#include "base/status.h"
#include "models/ops/decode_rows.h"

namespace cohort::models::cpu {

// Caches fp32, in either layout of decode_rows.h.
void decode_attention(float* y, const float* q, const float* k_cache, const float* v_cache,
                      DecodeRows rows, int n, const DecodeShape& shape);

}  // namespace cohort::models::cpu

namespace cohort::models::cuda {

// Where a launch split over the context meets (decode_attention.cuh): the
// splits' partial softmax states and a count per (row, block of heads),
// device memory the caller allocates once, the counts zeroed; every launch
// leaves them zeroed again. Launches that share a scratch must be ordered
// (one stream). Without it (null pointers) every row is one split.
constexpr int kDecodeAttnScratchBlocks = 2048;  // (row, block of heads, split) triples
constexpr int kDecodeAttnMaxSplits = 64;
constexpr size_t kDecodeAttnScratchFloats = size_t{kDecodeAttnScratchBlocks} * 4 * (256 + 2);
struct DecodeAttentionScratch {
  float* partials = nullptr;  // kDecodeAttnScratchFloats
  int* arrivals = nullptr;    // kDecodeAttnScratchBlocks, zeroed before first use
};

// head_dim 8, 16, 32, 64, 128 or 256: 8-dim pieces whose count divides a
// warp (decode_attention_supports).
bool decode_attention_supports(int head_dim);

// The kernel a launch takes. kTiles: the dot products and the weighted sum
// of V on the tensor cores (decode_attention_tiles.cuh), where the head
// size is 64 or 128 and a block's query heads number at most 8, else the
// lanes form; kLanes: the lanes form, CUDA cores only (decode_attention.cuh).
// kAuto takes the tiles where the launch has at least a block per
// multiprocessor (dozens of rows): with fewer, the lanes form's 16-warp
// blocks keep more of each row's positions in flight (an H200 at batch 1:
// 1,213 against 1,016 tok/s, bench/RESULTS.md).
enum class DecodeAttentionForm { kAuto, kLanes, kTiles };

// The form a name asks for: "lanes" or "tiles" (COHORT_INFER_ATTENTION);
// anything else is an error that names what was given.
Result<DecodeAttentionForm> parse_decode_attention_form(std::string_view name);

// The form a launch of n rows of this shape really takes.
DecodeAttentionForm decode_attention_form(int n, const DecodeShape& shape,
                                          DecodeAttentionForm wanted);

// How many splits of each row's positions a launch of n rows takes: enough
// blocks to fill the GPU once, within the scratch.
int decode_attention_splits(int n, const DecodeShape& shape, bool have_scratch,
                            DecodeAttentionForm form = DecodeAttentionForm::kAuto);

// Device pointers, on `stream`, no allocation. splits > 0 overrides the
// choice above (tests), within the scratch's bounds.
void decode_attention(Bf16Bits* y, const float* q, const Bf16Bits* k_cache,
                      const Bf16Bits* v_cache, DecodeRows rows, int n, const DecodeShape& shape,
                      const DecodeAttentionScratch& scratch, CUstream_st* stream, int splits = 0,
                      DecodeAttentionForm form = DecodeAttentionForm::kAuto);

// The same over a bf16 or fp8 cache (decode_rows.h's KvView; kv_fp8.h):
// an fp8 cache's values are its codes times their head's scale, exactly.
void decode_attention(Bf16Bits* y, const float* q, const KvView& cache, DecodeRows rows, int n,
                      const DecodeShape& shape, const DecodeAttentionScratch& scratch, CUstream_st* stream,
                      int splits = 0, DecodeAttentionForm form = DecodeAttentionForm::kAuto);

// A decode step's attention with its q/k/v preparation in the same kernel:
// equals qkv_rope_cache (rope.h) on `qkv` followed by decode_attention,
// one kernel a layer fewer. Each row's own position comes from the kernel's
// copy rather than the cache, and the positions below it are read before
// the kernel waits on its predecessor, so the rows must be at distinct
// slots, one position each, as in a decode step (in a packed prefill a row
// attends to positions other rows of the same call write). K/V of each row
// are written to the cache as qkv_rope_cache writes them.
void decode_attention_fused(Bf16Bits* y, Bf16Bits* k_cache, Bf16Bits* v_cache, const float* qkv,
                            const float* qkv_bias, const float* q_norm, const float* k_norm,
                            const float* cos, const float* sin, DecodeRows rows, int n,
                            const DecodeShape& shape, const DecodeAttentionScratch& scratch,
                            CUstream_st* stream, int splits = 0,
                            DecodeAttentionForm form = DecodeAttentionForm::kAuto);
// The same over a bf16 or fp8 cache; an fp8 one gets each row's codes, and
// attention uses them as read back (the row's own position included).
void decode_attention_fused(Bf16Bits* y, const KvView& cache, const float* qkv, const float* qkv_bias,
                            const float* q_norm, const float* k_norm, const float* cos, const float* sin,
                            DecodeRows rows, int n, const DecodeShape& shape,
                            const DecodeAttentionScratch& scratch, CUstream_st* stream, int splits = 0,
                            DecodeAttentionForm form = DecodeAttentionForm::kAuto);

}  // namespace cohort::models::cuda
