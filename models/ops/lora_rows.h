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
struct cublasContext;

namespace cohort::models::cpu {

void lora_shrink(float* t, const Bf16Bits* x, const Bf16Bits* const* a, const int32_t* ranks,
                 const int32_t* row_adapter, int n, int in, int r_max);
void lora_expand(float* y, int y_stride, const float* t, const Bf16Bits* const* b, const int32_t* ranks,
                 const float* scales, const int32_t* row_adapter, int n, int out, int r_max);
// The dense form's mask (cuda::lora_mask_bf16): t [n, width] with width a
// multiple of `columns`; out[r, i] = scales[s] * t[r, i] where s =
// row_adapter[r] >= 0 and column[s] <= i % columns < column[s] + ranks[s],
// else 0 (out in fp32 here, bf16 on the GPU).
void lora_mask(float* out, const float* t, const int32_t* row_adapter, const int32_t* column, const int32_t* ranks,
               const float* scales, int n, int width, int columns);

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


// The dense form, for a prompt step's many rows (and a wide model's larger
// decode steps) while the adapters loaded have few columns between them
// (CudaGraphEngine keeps them side by side):
// every adapter's A as rows of one matrix per group of targets, its B as
// columns of one matrix per target, so that shrink and expand are cuBLAS
// GEMMs over all n rows whatever adapter each row takes: 2 + targets
// launches a call however many prompts a step holds (the run kernels need
// two a call too, but ran their tiles at a fraction of the tensor cores'
// rate; cuBLAS calls a run starved the GPU of host time: bench/RESULTS.md).
//   t      [n, count·columns] fp32 = x Aᵀ        (A [count·columns, in]: target z's at rows z·columns)
//   masked [n, count·columns] bf16 = lora_mask(t) (each row its adapter's columns, scaled)
//   y[:, outputs] += masked Bᵀ                    (B [Σ width, count·columns], block diagonal: target
//                                                   z's rows read only its columns; the targets' outputs
//                                                   side by side in y, as LoraTargets lays them)
// Three launches a call: an expand a target cost some 4 µs each in a decode
// step (bench/RESULTS.md), more than reading the zeros of B's other blocks.
// The sums differ from the per-row kernel's by t rounded to bf16 (as PEFT's
// lora_B input is), and the extra work is columns / width of the
// projection's: what bounds `columns` (kLoraDenseMaxColumns).
inline constexpr int kLoraDenseMaxColumns = 256;
struct LoraDense {
  int columns = 0;                          // the adapters' ranks summed
  const Bf16Bits* a = nullptr;              // [targets.count · columns, in]
  const Bf16Bits* b = nullptr;              // [Σ width, targets.count · columns], block diagonal
  const int32_t* column = nullptr;          // per table slot: its adapter's first column
  float* t = nullptr;                       // scratch, n · count · columns floats
  Bf16Bits* masked = nullptr;               // scratch, as many bf16
};
// With a folded norm (decode steps' folded layers) the mask also scales
// each row by its rsqrt(Σ sumsq / in + eps), as lora_rows_bf16 does.
void lora_dense_bf16(cublasContext* blas, float* y, int y_stride, const Bf16Bits* x, const LoraDense& dense,
                     const int32_t* ranks, const float* scales, const int32_t* row_adapter, int n, int in,
                     const LoraTargets& targets, CUstream_st* stream, const LoraInputNorm& norm = {});
// Its two halves, for a caller that overlaps the first with the projection
// (both read only x): the shrink and the mask into dense.masked, then the
// expand into y. lora_dense_bf16 is the one, then the other, on one stream.
void lora_dense_shrink_bf16(cublasContext* blas, const Bf16Bits* x, const LoraDense& dense, const int32_t* ranks,
                            const float* scales, const int32_t* row_adapter, int n, int in, int count,
                            CUstream_st* stream, const LoraInputNorm& norm = {});
void lora_dense_expand_bf16(cublasContext* blas, float* y, int y_stride, const LoraDense& dense, int n,
                            const LoraTargets& targets, CUstream_st* stream);
// The gate and up targets' expand with the MLP's activation after it, in
// one pass over gate_up [n, 2I] (the base projection's sums, gate columns
// first): h [n, I] = bf16(silu(g) · u) with g = gate_up[:, :I] + masked
// B_gateᵀ and u = gate_up[:, I:] + masked B_upᵀ, where dense.masked holds
// the shrink's masked rows [n, 2·columns] (lora_dense_shrink_bf16 with the
// two targets) and dense.b the block-diagonal [2I, 2·columns]. It spares
// the expand's read and write of gate_up in fp32. dense.columns a multiple
// of 8; row_order: rows of one adapter side by side, or null.
void lora_swiglu_bf16(Bf16Bits* h, const float* gate_up, const LoraDense& dense, const int32_t* ranks,
                      const int32_t* row_adapter, const int32_t* row_order, int n, int I, CUstream_st* stream);
void lora_mask_bf16(Bf16Bits* out, const float* t, const int32_t* row_adapter, const int32_t* column,
                    const int32_t* ranks, const float* scales, int n, int width, int columns, CUstream_st* stream,
                    const LoraInputNorm& norm = {}, int in = 0);

}  // namespace cohort::models::cuda
