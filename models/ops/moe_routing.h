// Mixture-of-experts routing: the ops around the experts' GEMMs (CPU fp32
// reference, reductions in double; CUDA in moe_routing.cuh). For n tokens,
// E experts and top k, all row-major:
//
//   router_forward    probs [n, E] = softmax(logits) per row (probs may be
//                     logits: in place); the k largest probabilities of a row,
//                     in descending order, ties to the lower expert index ->
//                     experts [n, k]; weights [n, k] = those probabilities,
//                     divided by their sum when `renormalize` (Mixtral always,
//                     Qwen3-MoE with norm_topk_prob). prob_sums [E] (if not
//                     null) = column sums of probs: the load-balancing loss's
//                     router_prob_per_expert, times n.
//   router_backward   dlogits [n, E] += d/dlogits of (sum weights * dweights
//                     + sum_t,e probs[t, e] * dprob_all[e]); dprob_all [E] (or
//                     null) is the load-balancing loss's gradient per
//                     probability, the same for every row. The top-k choice is
//                     piecewise constant: no gradient flows through it.
//   permute           a stable counting sort of the n*k (token, choice) pairs
//                     by expert: offsets [E + 1] (expert e's rows are
//                     [offsets[e], offsets[e+1]) of the sorted order),
//                     source_rows [n*k] (the token each sorted row comes
//                     from), slots [n*k] (pair t*k + j's sorted row). Within an
//                     expert, pairs keep their order, so every backend sorts
//                     the same way (dropless: no capacity, no token dropped).
//   (gather_rows of ops/embedding.h sorts the rows: xs[r] = x[source_rows[r]].)
//   combine           out [n, dim] += sum_j weights[t, j] * ys[slots[t*k+j]];
//                     weights null: 1 (the gather's backward: the sum of a
//                     token's k rows' gradients).
//   combine_backward  dys[slots[t*k+j]] = weights[t, j] * dout[t] (overwritten);
//                     dweights [n, k] = dout[t] . ys[slots[t*k+j]] (overwritten).
//
// The model runs an expert's SwiGLU on its rows [offsets[e], offsets[e+1])
// of the gathered input with the ordinary linear and swiglu ops (model_moe.cc).
#pragma once

#include <cstddef>
#include <cstdint>

namespace cohort::models::cpu {

void moe_router_forward(float* probs, int32_t* experts, float* weights, float* prob_sums,
                        const float* logits, int n, int num_experts, int k, bool renormalize);
void moe_router_backward(float* dlogits, const float* dweights, const float* probs,
                         const int32_t* experts, const float* dprob_all, int n, int num_experts,
                         int k, bool renormalize);
void moe_permute(int32_t* offsets, int32_t* source_rows, int32_t* slots, const int32_t* experts,
                 int n, int num_experts, int k);
void moe_combine(float* out, const float* ys, const int32_t* slots, const float* weights, int n,
                 int k, int dim);
void moe_combine_backward(float* dys, float* dweights, const float* dout, const float* ys,
                          const float* weights, const int32_t* slots, int n, int k, int dim);

}  // namespace cohort::models::cpu
