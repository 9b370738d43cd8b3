// Projections that read packed weights: y = x · W^T (+ bias) with W a
// PackedWeightView (quantized_weight.h) and x a few activation rows, the
// decode step's q/k/v/o and gate/up/down GEMMs once the engine keeps its
// weights quantized. This header is the contract a GPU kernel implements;
// the CPU implementation behind make_cpu_quantized_projection() is the
// reference it is tested against (tests/models/quant/quantized_projection_test.cc
// is the matrix of formats × row counts × dtypes a CUDA implementation joins).
//
// Numerics (the definition): W as dequantize_view_rows gives it in fp32;
// x converted to fp32 (exact for bf16); y[i, n] = sum_k x[i, k] * W[n, k],
// summed in double, plus bias[n], rounded once to y's dtype. A kernel sums
// in fp32 in its own order and is held to the reference within a tolerance
// stated by its test; it dequantizes in registers and never writes W out.
//
// What a CUDA implementation is expected to do per format (the layouts are
// the checkpoints', so a loaded weight uploads as it is):
//   fp8-block   e4m3 -> bf16/fp32 in registers (cvt), times the 128 x 128
//               tile's scale; prefill can use Hopper's FP8 tensor cores with
//               block scales (cuBLASLt) instead.
//   gptq        qweight [in/8, out]: a word holds 8 consecutive k of one
//               output column, so threads along `out` read coalesced words;
//               act-order's g_idx gathers each k's group (or x is permuted by
//               the sorted g_idx once per step, as exllama does); zeros get
//               gptq_zero_offset added.
//   awq         qweight [in, out/8]: a word holds 8 output columns of one k,
//               in AWQ's nibble order {0,2,4,6,1,3,5,7}.
//   int8, int4  rows contiguous along `in` (int4: two a byte, even column
//               low), one fp32 scale per row and 128 columns: a warp per
//               output row, as the bf16 decode GEMV reads rows.
//   nf4         a 16-entry table lookup per nibble, the block's absmax from
//               its 8-bit code, the 256-block scale and the offset.
// Tensor parallelism cuts column-parallel weights (q/k/v/gate/up) along
// `out` and row-parallel ones (o/down) along `in`, on the format's groups
// (hf/load_quantization.h refuses other cuts); a rank's slice is itself a
// weight of one of these formats.
//
// Threading: an implementation may be called from one thread at a time
// (kernels enqueue on `stream`). Errors: Status naming what is unsupported.
#pragma once

#include <memory>

#include "base/dtype.h"
#include "base/status.h"
#include "models/quant/quantized_weight.h"

namespace cohort::models::quant {

struct ProjectionArgs {
  const void* x = nullptr;      // [rows, weight.cols]
  DType x_dtype = DType::kF32;  // kF32 or kBF16
  int rows = 0;                 // activation rows: 1..64 in decode, more in prefill
  void* y = nullptr;            // [rows, weight.rows], overwritten
  DType y_dtype = DType::kF32;  // kF32 or kBF16
  const float* bias = nullptr;  // [weight.rows], or null
  void* stream = nullptr;       // a CUDA implementation's CUstream_st*; the CPU ignores it
};

class QuantizedProjection {
 public:
  virtual ~QuantizedProjection() = default;
  // "cpu reference", "cuda gptq gemv", ...: for logs and test names.
  virtual const char* name() const = 0;
  // Ok when this implementation runs `weight` with `args` (format, row
  // count, dtypes, alignment); else an error saying which it lacks, so an
  // engine can choose another implementation at load, never mid-step.
  virtual Status supports(const PackedWeightView& weight, const ProjectionArgs& args) const = 0;
  // y = x · W^T (+ bias). The buffers are in the implementation's memory
  // (host for the CPU, device for CUDA). A CUDA implementation allocates
  // nothing per call (decode steps are captured as graphs); the CPU one
  // keeps a scratch block of dequantized rows that grows once.
  virtual Status project(const PackedWeightView& weight, const ProjectionArgs& args) = 0;
};

// Any format, any row count, x and y f32 or bf16 in host memory.
std::unique_ptr<QuantizedProjection> make_cpu_quantized_projection();

}  // namespace cohort::models::quant
