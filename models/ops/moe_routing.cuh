// CUDA mixture-of-experts routing (CPU reference and the math: moe_routing.h).
// Layouts are the reference's, all fp32. Deterministic: no atomics. The
// router runs one warp per token (softmax and k warp-wide arg-max passes,
// each choice the best of those ranked after the previous, so no list of
// chosen experts is kept); the column sums one thread per expert; the sort
// one block per expert, which counts the pairs of lower experts for its
// first row, then places its own pairs in pair order (a prefix over the
// threads' runs), so the sorted order is the reference's exactly. The kernels the
// decode graphs run (router, sort, combine) begin with begin_dependent(), so
// the graph engine launches them early (launch_dependent); the backend's
// plain launches make that a no-op.
#pragma once

#include <climits>

#include "models/cuda/common.cuh"
#include "models/ops/moe_routing.h"

namespace cohort::models::cuda {

constexpr int kMoeRowsPerBlock = 4;  // warps (one per token) in a router block

__device__ inline bool moe_ranks_before(float pa, int ia, float pb, int ib) {
  return pa > pb || (pa == pb && ia < ib);
}

__global__ void moe_router_forward_kernel(float* probs, int32_t* experts, float* weights,
                                          const float* logits, int n, int E, int k,
                                          bool renormalize) {
  begin_dependent();  // before any read or write (a no-op when launched plainly)
  const int lane = threadIdx.x & 31;
  const int t = blockIdx.x * kMoeRowsPerBlock + (threadIdx.x >> 5);
  if (t >= n) return;  // whole warps leave together
  const float* z = logits + static_cast<size_t>(t) * E;
  float* p = probs + static_cast<size_t>(t) * E;
  float max = -INFINITY;
  for (int e = lane; e < E; e += 32) max = fmaxf(max, z[e]);
  max = warp_max(max);
  float total = 0;
  for (int e = lane; e < E; e += 32) total += expf(z[e] - max);
  total = warp_sum(total);
  for (int e = lane; e < E; e += 32) p[e] = expf(z[e] - max) / total;  // z may be p
  __syncwarp();
  float prev_p = 0, chosen_sum = 0;
  int prev_i = -1;
  for (int j = 0; j < k; ++j) {
    float best_p = -INFINITY;
    int best_i = INT_MAX;
    for (int e = lane; e < E; e += 32) {
      const float pe = p[e];
      const bool after = j == 0 || moe_ranks_before(prev_p, prev_i, pe, e);
      if (after && moe_ranks_before(pe, e, best_p, best_i)) best_p = pe, best_i = e;
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float other_p = __shfl_xor_sync(0xffffffffu, best_p, o);
      const int other_i = __shfl_xor_sync(0xffffffffu, best_i, o);
      if (moe_ranks_before(other_p, other_i, best_p, best_i)) best_p = other_p, best_i = other_i;
    }
    if (best_i >= E) best_i = 0, best_p = p[0];  // only non-finite logits rank nothing
    prev_p = best_p, prev_i = best_i;
    chosen_sum += best_p;
    if (lane == 0) experts[static_cast<size_t>(t) * k + j] = best_i;
    if (lane == 0) weights[static_cast<size_t>(t) * k + j] = best_p;
  }
  if (renormalize && lane == 0) {
    for (int j = 0; j < k; ++j) weights[static_cast<size_t>(t) * k + j] /= chosen_sum;
  }
}

// One thread per expert: adjacent threads read adjacent columns of a row.
__global__ void moe_prob_sums_kernel(float* sums, const float* probs, int n, int E) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= E) return;
  double s = 0;
  for (int t = 0; t < n; ++t) s += probs[static_cast<size_t>(t) * E + e];
  sums[e] = static_cast<float>(s);
}

// dprob of one expert of a row (see moe_routing.h): the auxiliary term plus,
// for a chosen expert, the top-k weights' gradient.
__device__ inline float moe_dprob(int e, const int32_t* chosen, const float* dw, int k, float S,
                                  float dot_w, const float* dprob_all, bool renormalize) {
  float dp = dprob_all ? dprob_all[e] : 0.0f;
  for (int j = 0; j < k; ++j) {
    if (chosen[j] == e) dp += renormalize ? (dw[j] - dot_w) / S : dw[j];
  }
  return dp;
}

__global__ void moe_router_backward_kernel(float* dlogits, const float* dweights,
                                           const float* probs, const int32_t* experts,
                                           const float* dprob_all, int n, int E, int k,
                                           bool renormalize) {
  const int lane = threadIdx.x & 31;
  const int t = blockIdx.x * kMoeRowsPerBlock + (threadIdx.x >> 5);
  if (t >= n) return;
  const float* p = probs + static_cast<size_t>(t) * E;
  const int32_t* chosen = experts + static_cast<size_t>(t) * k;
  const float* dw = dweights + static_cast<size_t>(t) * k;
  float S = 0, dot_w = 0;
  for (int j = 0; j < k; ++j) S += p[chosen[j]];
  for (int j = 0; j < k; ++j) dot_w += dw[j] * (p[chosen[j]] / S);
  float dot_p = 0;
  for (int e = lane; e < E; e += 32) {
    dot_p += p[e] * moe_dprob(e, chosen, dw, k, S, dot_w, dprob_all, renormalize);
  }
  dot_p = warp_sum(dot_p);
  float* dz = dlogits + static_cast<size_t>(t) * E;
  for (int e = lane; e < E; e += 32) {
    dz[e] += p[e] * (moe_dprob(e, chosen, dw, k, S, dot_w, dprob_all, renormalize) - dot_p);
  }
}

// Block e: its first sorted row is the number of pairs with a lower expert;
// then its pairs, in pair order, take the rows after it. Each thread reads
// one run of consecutive pairs (16-byte loads) and counts both; one block
// scan of its own counts gives each thread where its pairs go, and it
// walks its run again to place them. Two reads of the choices and one
// barrier pass a block, where a chunk-by-chunk walk (a barrier per 256
// pairs) took about 0.15 ms at a training micro-batch's 65,536 pairs.
__device__ __forceinline__ int4 moe_load_choices(const int32_t* experts, int i, int end, bool aligned) {
  if (aligned && i + 3 < end) return *reinterpret_cast<const int4*>(experts + i);
  if (i + 3 < end) return make_int4(experts[i], experts[i + 1], experts[i + 2], experts[i + 3]);
  return make_int4(i < end ? experts[i] : INT_MAX, i + 1 < end ? experts[i + 1] : INT_MAX,
                   i + 2 < end ? experts[i + 2] : INT_MAX, INT_MAX);
}

__global__ void __launch_bounds__(kThreads) moe_permute_kernel(int32_t* offsets, int32_t* source_rows,
                                                               int32_t* slots, const int32_t* experts, int pairs,
                                                               int E, int k) {
  begin_dependent();  // before any read or write (a no-op when launched plainly)
  __shared__ int warp_below[kThreads / 32], warp_mine[kThreads / 32];
  const int e = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // Runs of a multiple of 4 pairs, so each starts on a 16-byte boundary.
  const int run = (pairs + 4 * kThreads - 1) / (4 * kThreads) * 4;
  const int begin = min(pairs, static_cast<int>(threadIdx.x) * run), end = min(pairs, begin + run);
  // (Only where the choices start on a 16-byte boundary, as the engines'
  // buffers do; the backend's callers may pass any int32 array.)
  const bool aligned = reinterpret_cast<uintptr_t>(experts) % 16 == 0;
  int below = 0, mine = 0;
  for (int i = begin; i < end; i += 4) {
    const int4 v = moe_load_choices(experts, i, end, aligned);
    below += (v.x < e) + (v.y < e) + (v.z < e) + (v.w < e);
    mine += (v.x == e) + (v.y == e) + (v.z == e) + (v.w == e);
  }
  // Inclusive scan of `mine` over the warp, then over the warps.
  int before = mine;
  for (int o = 1; o < 32; o <<= 1) {
    const int up = __shfl_up_sync(0xffffffffu, before, o);
    if (lane >= o) before += up;
  }
  int warp_total_below = below;
  for (int o = 16; o > 0; o >>= 1) warp_total_below += __shfl_xor_sync(0xffffffffu, warp_total_below, o);
  if (lane == 31) warp_mine[warp] = before;
  if (lane == 0) warp_below[warp] = warp_total_below;
  __syncthreads();
  int first = 0, earlier = 0;
  for (int w = 0; w < kThreads / 32; ++w) {
    first += warp_below[w];
    if (w < warp) earlier += warp_mine[w];
  }
  if (threadIdx.x == 0) offsets[e] = first;
  if (e == E - 1 && threadIdx.x == 0) offsets[E] = pairs;
  if (mine == 0) return;
  int row = first + earlier + before - mine;
  for (int i = begin; i < end; ++i) {
    if (experts[i] != e) continue;
    slots[i] = row;
    source_rows[row++] = i / k;
  }
}

__global__ void moe_combine_kernel(float* out, const float* ys, const int32_t* slots,
                                   const float* weights, int n, int k, int dim) {
  begin_dependent();  // before any read or write (a no-op when launched plainly)
  const size_t total = static_cast<size_t>(n) * dim;
  for (size_t x = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; x < total;
       x += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t t = x / dim, c = x % dim;
    float sum = 0;
    for (int j = 0; j < k; ++j) {
      const size_t pair = t * k + j;
      sum += (weights ? weights[pair] : 1.0f) * ys[static_cast<size_t>(slots[pair]) * dim + c];
    }
    out[x] += sum;
  }
}

__global__ void moe_spread_gradient_kernel(float* dys, const float* dout, const float* weights,
                                           const int32_t* slots, int n, int k, int dim) {
  const size_t total = static_cast<size_t>(n) * k * dim;
  for (size_t x = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; x < total;
       x += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t pair = x / dim, c = x % dim;
    dys[static_cast<size_t>(slots[pair]) * dim + c] = weights[pair] * dout[(pair / k) * dim + c];
  }
}

// One warp per (token, choice): dweights = dout[t] . ys[slot].
__global__ void moe_weight_gradient_kernel(float* dweights, const float* dout, const float* ys,
                                           const int32_t* slots, int n, int k, int dim) {
  const int lane = threadIdx.x & 31;
  const size_t pair = static_cast<size_t>(blockIdx.x) * kMoeRowsPerBlock + (threadIdx.x >> 5);
  if (pair >= static_cast<size_t>(n) * k) return;
  const float* d = dout + (pair / k) * dim;
  const float* y = ys + static_cast<size_t>(slots[pair]) * dim;
  float dot = 0;
  for (int c = lane; c < dim; c += 32) dot += d[c] * y[c];
  dot = warp_sum(dot);
  if (lane == 0) dweights[pair] = dot;
}

inline unsigned moe_warp_blocks(size_t rows) {
  return static_cast<unsigned>((rows + kMoeRowsPerBlock - 1) / kMoeRowsPerBlock);
}

}  // namespace cohort::models::cuda
