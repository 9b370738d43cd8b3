// Decode projections that read quantized weights in the row layout
// (models/quant/row_packed.h: codes along each output row, a scale and a
// zero point per row and group), dequantizing in registers:
//   quant_gemv:        y [n, out] (fp32) = x [n, in] · Wᵀ   (store or add into y)
//   quant_gemv_swiglu: h [n, I] (bf16) = silu(x · W_gateᵀ) * (x · W_upᵀ),
//                      W = [W_gate; W_up] of 2I rows, gate rows first
// with x bf16 and W[n, k] = scale[n, g] * (value(code) - zero[n, g]). They
// are gemv.h's forms for a weight of 4 or 8 bits: at decode batch 1 to 8 a
// projection is bound by the bytes of weight it reads, so reading half or a
// quarter of bf16's bytes is most of the speed a smaller format offers.
// From kQuantGemvMaxRows + 1 to 64 rows the tensor-core skinny GEMM reads
// the codes the same way (quant_skinny_gemm); beyond, a step is
// arithmetic-bound and the engine expands the weight into bf16
// (dequantize_rows_bf16) for cuBLASLt.
//
// The reference (CPU): W dequantized as row_packed.h defines it, sums in
// double, rounded once. The kernels sum each 16-byte piece's codes against
// x in fp32, scale the piece's sum once, and are held to the reference on
// random inputs (tests/models/quant_gemv_parity_test.cc).
#pragma once

#include <cstdint>

#include "models/ops/decode_rows.h"
#include "models/ops/gemv.h"
#include "models/quant/row_packed.h"

namespace cohort::models {

// A RowPackedWeight's buffers (device memory for the CUDA kernels).
using RowPackedView = quant::RowPackedView;

namespace cpu {

void quant_gemv(float* y, const Bf16Bits* x, const quant::RowPackedWeight& w, int n);
void quant_gemv_swiglu(Bf16Bits* h, const Bf16Bits* x, const quant::RowPackedWeight& w, int n);

}  // namespace cpu

namespace cuda {

constexpr int kQuantGemvMaxRows = 8;
// 1 <= n <= kQuantGemvMaxRows, and the widths whole 16-byte pieces of codes
// (what pack_rows guarantees).
bool quant_gemv_supported(const RowPackedView& w, int n);
// The folded norm (FoldedNorm, gemv.h) in chains of 16-column sums: the
// tensor-core form's blocks own 16 outputs each, so a producer's block
// leaves whole sums of its own. A consumer (plain or SwiGLU) scales its
// rows' sums; a producer adds into the residual (kAccumulate). Where
// quant_folded_norm_supported: the tensor-core form serves w at n rows,
// and w's rows (a producer's outputs) and columns are whole chunks.
constexpr int kQuantNormChunk = 16;
bool quant_folded_norm_supported(const RowPackedView& w, int n);
void quant_gemv(float* y, const Bf16Bits* x, const RowPackedView& w, int n, CUstream_st* stream,
                GemvOutput output, const FoldedNorm& norm = {});
void quant_gemv_swiglu(Bf16Bits* h, const Bf16Bits* x, const RowPackedView& w, int n,
                       CUstream_st* stream, const FoldedNorm& norm = {});
// Decode steps of up to kSkinnyMaxRows rows (the engine takes them from
// kQuantGemvMaxRows + 1) on the tensor cores: skinny_gemm_bf16's kernel
// (gemv.h) with each weight decoded in registers as it is loaded, rounded
// to bf16 as dequantize_rows_bf16 rounds it, so the sums are those of the
// bf16 projection over the expanded weight, reading 4 or 8 bits a weight
// instead of the expansion's 16 written and read back. Widths whole
// multiples of 256 columns (the kernel's K split), groups of 8.
bool quant_skinny_supported(const RowPackedView& w, int n);
void quant_skinny_gemm(float* y, const Bf16Bits* x, const RowPackedView& w, int n, const SkinnyScratch& scratch,
                       CUstream_st* stream, GemvOutput output);
// h [n, rows / 2] = silu(x · W_gateᵀ) * (x · W_upᵀ), W = [W_gate; W_up].
void quant_skinny_swiglu(Bf16Bits* h, const Bf16Bits* x, const RowPackedView& w, int n,
                         const SkinnyScratch& scratch, CUstream_st* stream);
// All of W as bf16 [rows, cols] (each element scale * (value - zero) in
// fp32, rounded to nearest even), or as fp32 (exactly the reference's).
void dequantize_rows_bf16(Bf16Bits* out, const RowPackedView& w, CUstream_st* stream);
void dequantize_rows_f32(float* out, const RowPackedView& w, CUstream_st* stream);

}  // namespace cuda
}  // namespace cohort::models
