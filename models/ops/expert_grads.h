// The experts' weight gradients of a mixture of experts' training backward
// (models/cuda/train_experts.cuh), over rows sorted by expert (the routing's
// permute, ops/moe_routing.h): expert e's rows are [offsets[e],
// offsets[e+1]), and
//
//   dw_e [O, I] (fp32) += Σ over its rows r of g[r, :]ᵀ x[r, :]
//
// with g [rows, O] the expert's outputs' gradients and x [rows, I] its
// inputs, both bf16 with contiguous rows, and dw_e = dw + e · expert_stride
// (row-major, as the expert's weight [O, I] is stored). Products in fp32,
// summed in fp32.
//
// Why a kernel of its own: cuBLAS groups GEMMs only where the output is the
// inputs' type (13.1 answers CUBLAS_STATUS_NOT_SUPPORTED for bf16 into
// fp32), and one call an expert leaves most of the GPU idle: an expert's
// [384 x 1024] tile is 24 blocks of 128 x 128 on 132 multiprocessors. These
// gradients took 62 of a 191 ms step of the 2.4B preset on an H100 that
// way (bench/RESULTS.md). Here one launch covers every expert: a block per
// (expert, 128 x 128 tile of dw_e), looping over the expert's rows, 32 a
// stage; experts without rows leave at once. Each block owns its tile for
// the whole sum, so results are deterministic and nothing is atomic.
#pragma once

#include <cstddef>
#include <cstdint>

#include "models/ops/decode_rows.h"

struct CUstream_st;

namespace cohort::models::cpu {

// The definition, in fp32, rows in order.
void expert_weight_grads(float* dw, size_t expert_stride, const Bf16Bits* g, const Bf16Bits* x,
                         const int32_t* offsets, int E, int O, int I);

}  // namespace cohort::models::cpu

namespace cohort::models::cuda {

// O and I multiples of 8 (16-byte rows of pieces); g, x 16-byte aligned.
bool expert_weight_grads_supported(int O, int I);
// offsets on the device; E + 1 of them.
void expert_weight_grads_bf16(float* dw, size_t expert_stride, const Bf16Bits* g, const Bf16Bits* x,
                              const int32_t* offsets, int E, int O, int I, CUstream_st* stream);

}  // namespace cohort::models::cuda
