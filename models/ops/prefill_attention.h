// Attention of prompt rows over the bf16 KV cache, flash-style: the bf16
// decode engine's prefill (models/decode/cuda_graph_engine.h).
//
// The contract is decode_attention's (decode_attention.h, whose CPU
// reference serves for this kernel too): each row attends over its slot's
// positions [0, positions[r]], grouped-query heads, scale 1/sqrt(D). What a
// prefill adds is that its rows come in runs: consecutive rows of one slot
// at consecutive positions (a prompt, or a chunk of one after the positions
// an earlier chunk or a shared prefix left in the cache). A run's rows
// share their keys, so the kernel takes them 128 at a time as one tile of
// queries against 64-key tiles of the cache on the tensor cores, where
// decode attention would read each row's keys once per row: at a
// 2,048-token prompt that is the difference between reading the cache 16
// times and 2,048 times.
//
// A launch takes a list of tiles (prefill_attention_tiles below), each up
// to kPrefillTileRows rows of one run; the rows of the tiles must already
// be in the cache (qkv_rope_cache writes them first).
#pragma once

#include <cstdint>
#include <vector>

#include "models/ops/decode_rows.h"

namespace cohort::models {

inline constexpr int kPrefillTileRows = 128;

// The tiles of rows [begin, end): runs broken where the slot changes or the
// position does not follow, each run cut every kPrefillTileRows rows.
// Appends (first row, row count) pairs to `tiles`.
void prefill_attention_tiles(const int32_t* slots, const int32_t* positions, int begin, int end,
                             std::vector<int32_t>& tiles);

}  // namespace cohort::models

namespace cohort::models::cuda {

// head_dim 64 or 128 (the flash kernels' sizes).
bool prefill_attention_supports(int head_dim);

// Where a launch split over the keys meets: a few tiles over a long context
// (a short chunk after a cached prefix or earlier chunks) are too few blocks
// for the GPU, so each (tile, head) is cut into splits of its key tiles
// whose partial states a second kernel folds. Device memory the caller
// allocates once (kPrefillScratchFloats); without it every (tile, head) is
// one block.
inline constexpr int kPrefillMaxSplits = 16;
inline constexpr int kPrefillScratchBlocks = 256;  // (tile, head, split) triples
inline constexpr size_t kPrefillScratchFloats = size_t{kPrefillScratchBlocks} * kPrefillTileRows * (128 + 2);
struct PrefillAttentionScratch {
  float* partials = nullptr;
};

// The splits a launch takes: enough blocks to fill the GPU once, at least
// two key tiles each, within the scratch; `longest`: the most positions a
// tile's last row sees.
int prefill_attention_splits(int tile_count, int heads, int longest, bool have_scratch);

// Device pointers, on `stream`, no allocation: `tiles` holds tile_count
// (first row, row count) pairs as prefill_attention_tiles makes them; q
// [n, hq * D] fp32 as qkv_rope_cache leaves it, y [n, hq * D] bf16, both
// indexed by row as `rows` is.
void prefill_attention(Bf16Bits* y, const float* q, const Bf16Bits* k_cache, const Bf16Bits* v_cache,
                       DecodeRows rows, const int32_t* tiles, int tile_count, const DecodeShape& shape,
                       CUstream_st* stream, const PrefillAttentionScratch& scratch = {}, int longest = 0);
// The same over a bf16 or fp8 cache (decode_rows.h's KvView; kv_fp8.h).
void prefill_attention(Bf16Bits* y, const float* q, const KvView& cache, DecodeRows rows, const int32_t* tiles,
                       int tile_count, const DecodeShape& shape, CUstream_st* stream,
                       const PrefillAttentionScratch& scratch = {}, int longest = 0);

}  // namespace cohort::models::cuda
