// Small-batch projections of the bf16 decode engine (CPU reference here and
// in gemv.cc; CUDA in gemv.cuh):
//   gemv_bf16:        y [n, out] (fp32) = x [n, in] · wᵀ
//   gemv_swiglu_bf16: h [n, I] (bf16) = silu(x · w_gateᵀ) * (x · w_upᵀ), with
//                     w = [w_gate; w_up] of [2I, in] (gate rows first), the
//                     MLP's fused gate/up projection and its SwiGLU in one pass
// where w is bf16 row-major [out, in] (Hugging Face's orientation), x bf16,
// accumulation fp32. gemv_swiglu_bf16 equals gemv_bf16 into an fp32 gate_up
// followed by swiglu_bf16 (swiglu.h), up to the order of the sums.
//
// The norm forms take the fp32 residual stream instead of x and normalise it
// themselves: gemv_norm_bf16(y, residual, norm_weight, eps, ...) equals
// add_rmsnorm_bf16(residual, nullptr, norm_weight, xn, ...) (rmsnorm.h)
// followed by gemv_bf16(y, xn, ...), and gemv_norm_swiglu_bf16 likewise, up
// to xn's rounding: the norm forms keep the normalised rows in fp32 (one
// bf16 rounding fewer).
// With GemvOutput::kAccumulate gemv_bf16 adds into y (y += x · wᵀ), so the
// residual stream takes an output projection in place. At batch 1 a decode
// step is bound by its count of small kernels rather than by bytes, and
// these forms take the residual add and the RMSNorm out of it (two kernels
// a layer).
//
// Why not cuBLAS here: at decode batch 1 to 8 a projection reads each weight
// once for n multiply-adds, so it is bound by memory bandwidth, and cuBLAS's
// tiled kernels launch too few blocks at these shapes to keep HBM busy
// (bench/RESULTS.md has the per-kernel times). The CUDA kernels take a warp
// per output row, all of its 16-byte weight loads in flight at once.
#pragma once

#include "models/ops/decode_rows.h"

namespace cohort::models::cpu {

void gemv_bf16(float* y, const Bf16Bits* x, const Bf16Bits* w, int n, int in, int out);
void gemv_swiglu_bf16(Bf16Bits* h, const Bf16Bits* x, const Bf16Bits* w, int n, int in,
                      int intermediate);

}  // namespace cohort::models::cpu

// Device pointers, on `stream`, no allocation. Only for shapes where
// gemv_supported holds: 1 <= n <= kGemvMaxRows, `in` a multiple of 8 (rows
// start on 16-byte boundaries) and pointers 16-byte aligned.
namespace cohort::models::cuda {

constexpr int kGemvMaxRows = 8;
bool gemv_supported(int n, int in);
enum class GemvOutput { kStore, kAccumulate };
void gemv_bf16(float* y, const Bf16Bits* x, const Bf16Bits* w, int n, int in, int out,
               CUstream_st* stream, GemvOutput output = GemvOutput::kStore);
void gemv_swiglu_bf16(Bf16Bits* h, const Bf16Bits* x, const Bf16Bits* w, int n, int in,
                      int intermediate, CUstream_st* stream);

// The norm forms: every warp takes the sum of squares of the residual row it
// reads anyway (gemv.cuh). One row: from two rows on the decode engine's
// tensor-core projections with a separate RMSNorm are faster (batch 2:
// 1,077 against 1,107 us a step, batch 4: 1,145 against 1,698;
// bench/RESULTS.md).
constexpr int kGemvNormMaxRows = 1;
bool gemv_norm_supported(int n, int in);
// With `normalized` (may be null) it also writes the normalised rows as
// add_rmsnorm_bf16 would into xn, so that kernels after it need no norm of
// their own: a sparse layer's router leaves them for its experts.
void gemv_norm_bf16(float* y, const float* residual, const float* norm_weight, float eps,
                    const Bf16Bits* w, int n, int in, int out, CUstream_st* stream,
                    Bf16Bits* normalized = nullptr);
void gemv_norm_swiglu_bf16(Bf16Bits* h, const float* residual, const float* norm_weight,
                           float eps, const Bf16Bits* w, int n, int in, int intermediate,
                           CUstream_st* stream);

// Tensor-core forms for 2 to 64 rows (skinny_gemm.cuh, tile_gemm.cuh), the same contracts
// as gemv_bf16 (store or accumulate) and gemv_swiglu_bf16, for `in` a
// multiple of 256. Beyond 64 rows a projection is arithmetic-bound and
// cuBLASLt's tiles serve it. With scratch, a projection whose output tiles
// would not fill the machine splits K over several blocks (they meet in the
// scratch; the counts go back to zero at the end of each call, so one
// scratch serves every call on a stream); without, it runs unsplit.
constexpr int kSkinnyMaxRows = 64;

// An RMSNorm folded into the tile projections (9 to 64 rows, one rank), so
// that a decode layer has no norm kernels: a producer, an output projection
// adding into the residual stream (GemvOutput::kAccumulate), also leaves the
// next norm's input bf16(x * w) and the sums of squares of each row's
// 64-column chunks; the consumer reads that input and scales each row of
// its sums by 1 / sqrt(mean(x^2) + eps) from the chunks' sums (in order, so
// results are deterministic). This equals add_rmsnorm_bf16 then the
// projection, up to where the bf16 rounding falls (before the row's scale
// rather than after). rms_chunks_bf16 (rmsnorm.h) starts a chain.
constexpr int kNormChunk = 64;
struct FoldedNorm {
  // Consumer: the producer's sums [n, in / chunk]; null: no norm.
  const float* in_sumsq = nullptr;
  float eps = 0.0f;
  // Producer: the next norm's weight [out]; bf16(x * w) goes to out_x
  // [n, out], the sums to out_sumsq [n, out / chunk]. Null: none.
  const float* out_weight = nullptr;
  Bf16Bits* out_x = nullptr;
  float* out_sumsq = nullptr;
  // Columns a sum covers: kNormChunk for the tile forms; the quantized
  // GEMV's 16-row tiles make chains of kQuantNormChunk (quant_gemv.h).
  int chunk = kNormChunk;
};
// Whether a projection of n rows from `in` to `out` features (for SwiGLU:
// `out` is I) can take the folded norm: the tile forms serve it, and the
// widths are whole chunks.
bool folded_norm_supported(int n, int in, int out, bool swiglu = false);
constexpr int kSkinnyMaxSplitBlocks = 1024;
struct SkinnyScratch {
  float* partials = nullptr;  // kSkinnyScratchFloats
  int* arrivals = nullptr;    // kSkinnyScratchTiles, zeroed before first use
};
constexpr size_t kSkinnyScratchFloats = size_t{kSkinnyMaxSplitBlocks} * 32 * 32;
constexpr size_t kSkinnyScratchTiles = kSkinnyMaxSplitBlocks / 2;
bool skinny_gemm_supported(int n, int in);
// K splits a projection of `tiles` 16-row output tiles takes (tests).
int skinny_splits(int tiles, int in);
void skinny_gemm_bf16(float* y, const Bf16Bits* x, const Bf16Bits* w, int n, int in, int out,
                      const SkinnyScratch& scratch, CUstream_st* stream,
                      GemvOutput output = GemvOutput::kStore, const FoldedNorm& norm = {});
void skinny_gemm_swiglu_bf16(Bf16Bits* h, const Bf16Bits* x, const Bf16Bits* w, int n, int in,
                             int intermediate, const SkinnyScratch& scratch, CUstream_st* stream,
                             const FoldedNorm& norm = {});

// From 9 rows the tensor-core forms stage x and 64 or 128 weight rows a
// block through shared memory (tile_gemm.cuh), K split over a cluster of 1
// to 8 blocks; they take no scratch. tile_plan gives the block shape for n
// rows of an `out`-output projection (for SwiGLU `out` is I) on a device of
// `multiprocessors`: mt 16-row x tiles a warp (32 mt rows a block), bn
// weight rows a block (0: the shape is not served this way), tiles blocks
// along the outputs, splits blocks along K, row_blocks along the rows.
struct TilePlan {
  int mt = 0, bn = 0, tiles = 0, splits = 0, row_blocks = 1;
};
TilePlan tile_plan(int n, int in, int out, bool swiglu, int multiprocessors);
// The tile form with a given plan (benchmarks compare plans): SwiGLU into h
// when h is non-null (out is then I), else y as `output` says.
void tile_gemm_bf16(const TilePlan& plan, float* y, Bf16Bits* h, const Bf16Bits* x,
                    const Bf16Bits* w, int n, int in, int out, GemvOutput output,
                    CUstream_st* stream, const FoldedNorm& norm = {});

}  // namespace cohort::models::cuda
