// A mixture of experts' SwiGLU MLPs over rows sorted by expert, in bf16 (the
// graph engine's sparse layers; the routing before and the weighted sum
// after are ops/moe_routing.h's). After permute, expert e's rows are
// [offsets[e], offsets[e+1]) of the sorted order, sorted row r coming from
// input row source_rows[r]:
//
//   experts_swiglu  h [pairs, I] (bf16) = silu(x[src] · gate_eᵀ) * (x[src] · up_eᵀ)
//                   with x [n, H] bf16 and w_gu [E, 2I, H] bf16 (expert e's
//                   I gate rows, then its I up rows)
//   experts_down    ys [pairs, H] (fp32) = h · down_eᵀ, w_down [E, H, I] bf16
//
// The CUDA forms run a block per (active expert, tile of output features),
// a warp per feature: the warp streams its weight row once per 8 of the
// expert's rows, so a decode step reads each chosen expert's weights once
// and nothing of the others. Block row y takes the y-th expert with rows,
// found from the offsets by a ballot over the experts (no list is kept:
// one kernel fewer per layer); blocks past the last such expert leave at
// once, so `max_active` (at most E and the pair count) sizes the grid. H and
// I must be multiples of 8 (16-byte loads): experts_supported.
//
// Decode steps of a few rows take the pair form instead: the same MLPs per
// (row, choice) pair in pair order, with no sort. Pair p = r k + j goes
// through expert experts[p]:
//
//   pairs_swiglu    h [n k, I] (bf16) = silu(x[r] · gate_eᵀ) * (x[r] · up_eᵀ)
//   pairs_down_add  out [n, H] += Σ_j weights[r k + j] · (h[r k + j] · down_eᵀ),
//                   the k terms added in j order (moe_combine's order)
//
// One kernel fewer than route, swiglu, down and combine (no sort, and the
// weighted sum is the down projection's epilogue), and no expert lookup by
// ballot. A chosen expert's weights are read once per pair, so for rows
// whose experts repeat (larger batches) the sorted form reads less:
// moe_pairs_supported bounds the rows.
#pragma once

#include <cstdint>

#include "models/ops/decode_rows.h"

struct CUstream_st;

namespace cohort::models::cpu {

// fp32 accumulation over bf16 inputs, h rounded to bf16 as the CUDA form does.
void moe_experts_swiglu(Bf16Bits* h, const Bf16Bits* x, const Bf16Bits* w_gu, const int32_t* offsets,
                        const int32_t* source_rows, int E, int H, int I);
void moe_experts_down(float* ys, const Bf16Bits* h, const Bf16Bits* w_down, const int32_t* offsets, int E,
                      int H, int I);

void moe_pairs_swiglu(Bf16Bits* h, const Bf16Bits* x, const Bf16Bits* w_gu, const int32_t* experts, int n, int k,
                      int H, int I);
void moe_pairs_down_add(float* out, const Bf16Bits* h, const Bf16Bits* w_down, const int32_t* experts,
                        const float* weights, int n, int k, int H, int I);

}  // namespace cohort::models::cpu

namespace cohort::models::cuda {

bool moe_experts_supported(int H, int I);
void moe_experts_swiglu_bf16(Bf16Bits* h, const Bf16Bits* x, const Bf16Bits* w_gu, const int32_t* offsets,
                             const int32_t* source_rows, int E, int max_active, int H, int I, CUstream_st* stream);
void moe_experts_down_bf16(float* ys, const Bf16Bits* h, const Bf16Bits* w_down, const int32_t* offsets, int E,
                           int max_active, int H, int I, CUstream_st* stream);
// The pair form: up to kMoePairRows rows, kMoePairChoices choices a row
// and 256 experts. Its SwiGLU ranks each row's experts itself from the
// router's logits [n, E] (moe_router_forward's choices and weights, which
// it writes to experts and weights [n k] for the down projection).
constexpr int kMoePairRows = 4;
constexpr int kMoePairChoices = 8;
bool moe_pairs_supported(int n, int E, int k, int H, int I);
void moe_pairs_swiglu_bf16(Bf16Bits* h, int32_t* experts, float* weights, const Bf16Bits* x, const Bf16Bits* w_gu,
                           const float* logits, int n, int E, int k, bool renormalize, int H, int I,
                           CUstream_st* stream);
void moe_pairs_down_add_bf16(float* out, const Bf16Bits* h, const Bf16Bits* w_down, const int32_t* experts,
                             const float* weights, int n, int k, int H, int I, CUstream_st* stream);
// The routing ops of moe_routing.cuh as the graph engine calls them
// (device pointers, on `stream`): the router's softmax and top k (probs in
// place of logits), the stable sort by expert, and out [n, dim] += the
// weighted sum of each row's k outputs.
void moe_route(float* logits, int32_t* experts, float* weights, int32_t* offsets, int32_t* source_rows,
               int32_t* slots, int n, int E, int k, bool renormalize, CUstream_st* stream);
void moe_combine_rows(float* out, const float* ys, const int32_t* slots, const float* weights, int n, int k,
                      int dim, CUstream_st* stream);

}  // namespace cohort::models::cuda
