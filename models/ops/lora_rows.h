// Several LoRA adapters over one batch, each row with its own (the graph
// engine's served adapters; Punica's BGMV, as vLLM's multi-LoRA kernels
// shrink and expand): for a projection W [out, in] and row r of adapter
// a = row_adapter[r] (-1: none),
//
//   shrink  t [n, r_max]    t[r, c] = A_a[c, :] · x[r, :]  (c < rank_a; 0 past it or without an adapter)
//   expand  y [n, out]      y[r, o] += scale_a · Σ_c B_a[o, c] t[r, c]   (rows without an adapter untouched)
//
// with A_a bf16 [rank_a, in] and B_a bf16 [out, rank_a] (PEFT's lora_A and
// lora_B, rounded), x bf16 [n, in] the projection's input and y fp32 with
// row stride y_stride (a slice of a fused output: q, k and v of q|k|v).
// `a`, `b`, `ranks` and `scales` are per adapter index (null pointers for
// an adapter without this projection); the row indices and tables are read
// on the device, so a captured graph serves whatever adapters the rows
// name at replay. in % 8 == 0 (16-byte loads) and ranks up to r_max.
//
// On the GPU (lora_rows.cuh) shrink and expand are one launch, t never
// leaving the chip, and targets that read the same x (q, k and v; gate and
// up) share it (LoraTargets): target z's tables at a + z * table_stride
// (b likewise), its outputs at columns [column[z], column[z] + width[z])
// of y. That is the single-target form once per target; the reference is
// that.
#pragma once

#include <cstdint>

#include "models/ops/decode_rows.h"

struct CUstream_st;

namespace cohort::models::cpu {

void lora_shrink(float* t, const Bf16Bits* x, const Bf16Bits* const* a, const int32_t* ranks,
                 const int32_t* row_adapter, int n, int in, int r_max);
void lora_expand(float* y, int y_stride, const float* t, const Bf16Bits* const* b, const int32_t* ranks,
                 const float* scales, const int32_t* row_adapter, int n, int out, int r_max);

}  // namespace cohort::models::cpu

namespace cohort::models {

// order [n] = the rows 0..n-1 by adapter (slots 0..slots-1, then rows
// without one), each adapter's rows in row order: a counting sort, O(n +
// slots). Adapters outside [0, slots) count as none.
void lora_rows_by_adapter(int32_t* order, const int32_t* row_adapter, int n, int slots);

}  // namespace cohort::models

namespace cohort::models::cuda {

inline constexpr int kLoraMaxTargets = 3;
inline constexpr int kLoraMaxRank = 64;  // the largest rank the kernel takes
struct LoraTargets {
  int count = 1;
  size_t table_stride = 0;  // table entries between consecutive targets'
  int width[kLoraMaxTargets] = {};
  int column[kLoraMaxTargets] = {};
};

// Where the projection folds its input's RMSNorm (gemv.h's FoldedNorm: x
// holds bf16(v * norm weight), not yet scaled, and sumsq each row's sums of
// squares in chunks of kNormChunk = 64 columns), t scales by the row's
// rsqrt(Σ sumsq / in + eps), as the projection's own sums do.
struct LoraInputNorm {
  const float* sumsq = nullptr;  // [n, in / 64]; null: x is the input as it is
  float eps = 0.0f;
};

// y += each row's adapter's scale · B_a A_a x (the reference's shrink then
// expand, t kept on chip), for every target of `targets` in one launch.
// row_order: a permutation of the n rows that puts rows of one adapter
// side by side (lora_rows_by_adapter; null: as they are); the result does
// not depend on it, only the work does. Ranks up to kLoraMaxRank; widths
// multiples of 8, y_stride and columns even.
void lora_rows_bf16(float* y, int y_stride, const Bf16Bits* x, const Bf16Bits* const* a, const Bf16Bits* const* b,
                    const int32_t* ranks, const float* scales, const int32_t* row_adapter, const int32_t* row_order,
                    int n, int in, const LoraTargets& targets, CUstream_st* stream, const LoraInputNorm& norm = {});
// One target of `out` outputs from column 0.
void lora_rows_bf16(float* y, int y_stride, const Bf16Bits* x, const Bf16Bits* const* a, const Bf16Bits* const* b,
                    const int32_t* ranks, const float* scales, const int32_t* row_adapter, const int32_t* row_order,
                    int n, int in, int out, CUstream_st* stream, const LoraInputNorm& norm = {});

// Runs of consecutive rows that share an adapter (a prompt's rows; on the
// GPU, lora_runs.cuh): `tiles` [tile_count, 3] (device int32: first row,
// rows 1..kLoraRunTileRows, table slot) cut from the runs; per tile and
// target, t = scale · x Aᵀ into the tile's rows of `t` (fp32 scratch,
// kLoraRunScratchStride floats a row), then y += t Bᵀ. The sums of
// lora_rows_bf16 over those rows, in two launches however many runs there
// are. in % 8 == 0, y_stride and columns even, widths multiples of 8.
inline constexpr int kLoraRunTileRows = 16;
inline constexpr int kLoraRunScratchStride = kLoraMaxTargets * kLoraMaxRank;
void lora_runs_bf16(float* y, int y_stride, const Bf16Bits* x, const Bf16Bits* const* a, const Bf16Bits* const* b,
                    const int32_t* ranks, const float* scales, const int32_t* tiles, int tile_count, float* t,
                    int in, const LoraTargets& targets, CUstream_st* stream);

}  // namespace cohort::models::cuda
