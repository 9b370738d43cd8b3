// CUDA experts' SwiGLU MLPs over sorted rows (contract and CPU reference:
// moe_experts.h), and the routing launchers the graph engine calls.
//
// A block is 4 warps; block (x, y) takes output features [4x, 4x + 4) of the
// y-th active expert, a warp one feature (the gate row and its up row in the
// SwiGLU form). The warp streams its weight rows in 16-byte pieces, stride
// 256 elements, against up to kMoeRowsPerPass of the expert's rows at once,
// so its weights are read once per that many rows; the lanes' sums meet by
// shuffles. Every kernel here waits for its predecessor first thing
// (begin_dependent, before the first read of the routing's outputs and the
// first write), so each launches early behind the one before
// (launch_dependent), as the dense layers' kernels do.
#pragma once

#include "models/cuda/common.cuh"
#include "models/ops/moe_experts.h"
#include "models/ops/moe_routing.cuh"

namespace cohort::models::cuda {

constexpr int kMoeExpertWarps = 4;
constexpr int kMoeRowsPerPass = 8;

bool moe_experts_supported(int H, int I) { return H > 0 && I > 0 && H % 8 == 0 && I % 8 == 0; }

// The y-th expert (in expert order) whose rows are not empty, or -1: the
// warp looks at 32 experts at a time and counts them by ballot. Every lane
// of the warp must call it.
__device__ __forceinline__ int moe_nth_active_expert(const int32_t* offsets, int E, int y) {
  const int lane = threadIdx.x % 32;
  int seen = 0;
  for (int base = 0; base < E; base += 32) {
    const int e = base + lane;
    unsigned mask = __ballot_sync(0xffffffffu, e < E && offsets[e + 1] > offsets[e]);
    const int here = __popc(mask);
    if (y < seen + here) {
      for (int skip = y - seen; skip > 0; --skip) mask &= mask - 1;  // drop the lowest set bits
      return base + __ffs(mask) - 1;
    }
    seen += here;
  }
  return -1;
}

// Rows [first, last) of expert `e`: h = SwiGLU for feature f.
__global__ void moe_experts_swiglu_kernel(Bf16Bits* h, const Bf16Bits* x, const Bf16Bits* w_gu,
                                          const int32_t* offsets, const int32_t* source_rows, int E, int H,
                                          int I) {
  begin_dependent();
  const int e = moe_nth_active_expert(offsets, E, static_cast<int>(blockIdx.y));
  if (e < 0) return;
  const int f = blockIdx.x * kMoeExpertWarps + static_cast<int>(threadIdx.x / 32);
  const int lane = threadIdx.x % 32;
  if (f >= I) return;  // whole warps
  const int first = offsets[e], last = offsets[e + 1];
  const Bf16Bits* gate = w_gu + (static_cast<size_t>(e) * 2 * I + f) * H;
  const Bf16Bits* up = gate + static_cast<size_t>(I) * H;
  for (int r0 = first; r0 < last; r0 += kMoeRowsPerPass) {
    const int rows = min(kMoeRowsPerPass, last - r0);
    const Bf16Bits* xr[kMoeRowsPerPass];
    float g[kMoeRowsPerPass], u[kMoeRowsPerPass];
#pragma unroll
    for (int r = 0; r < kMoeRowsPerPass; ++r) {
      xr[r] = x + static_cast<size_t>(source_rows[r0 + min(r, rows - 1)]) * H;
      g[r] = 0.0f, u[r] = 0.0f;
    }
    for (int k = lane * 8; k < H; k += 32 * 8) {
      float gw[8], uw[8];
      unpack8_bf16(__ldg(reinterpret_cast<const uint4*>(gate + k)), gw);
      unpack8_bf16(__ldg(reinterpret_cast<const uint4*>(up + k)), uw);
#pragma unroll
      for (int r = 0; r < kMoeRowsPerPass; ++r) {
        if (r >= rows) break;  // the same for every lane
        float xv[8];
        unpack8_bf16(*reinterpret_cast<const uint4*>(xr[r] + k), xv);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          g[r] = fmaf(gw[j], xv[j], g[r]);
          u[r] = fmaf(uw[j], xv[j], u[r]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kMoeRowsPerPass; ++r) {
      if (r >= rows) break;
      const float gs = warp_sum(g[r]), us = warp_sum(u[r]);
      if (lane == 0) h[static_cast<size_t>(r0 + r) * I + f] = to_bf16_bits(gs / (1.0f + __expf(-gs)) * us);
    }
  }
}

__global__ void moe_experts_down_kernel(float* ys, const Bf16Bits* h, const Bf16Bits* w_down,
                                        const int32_t* offsets, int E, int H, int I) {
  begin_dependent();
  const int e = moe_nth_active_expert(offsets, E, static_cast<int>(blockIdx.y));
  if (e < 0) return;
  const int o = blockIdx.x * kMoeExpertWarps + static_cast<int>(threadIdx.x / 32);
  const int lane = threadIdx.x % 32;
  if (o >= H) return;
  const int first = offsets[e], last = offsets[e + 1];
  const Bf16Bits* w = w_down + (static_cast<size_t>(e) * H + o) * I;
  for (int r0 = first; r0 < last; r0 += kMoeRowsPerPass) {
    const int rows = min(kMoeRowsPerPass, last - r0);
    float acc[kMoeRowsPerPass];
#pragma unroll
    for (int r = 0; r < kMoeRowsPerPass; ++r) acc[r] = 0.0f;
    for (int k = lane * 8; k < I; k += 32 * 8) {
      float wv[8];
      unpack8_bf16(__ldg(reinterpret_cast<const uint4*>(w + k)), wv);
#pragma unroll
      for (int r = 0; r < kMoeRowsPerPass; ++r) {
        if (r >= rows) break;
        float hv[8];
        unpack8_bf16(*reinterpret_cast<const uint4*>(h + static_cast<size_t>(r0 + r) * I + k), hv);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[r] = fmaf(wv[j], hv[j], acc[r]);
      }
    }
#pragma unroll
    for (int r = 0; r < kMoeRowsPerPass; ++r) {
      if (r >= rows) break;
      const float sum = warp_sum(acc[r]);
      if (lane == 0) ys[static_cast<size_t>(r0 + r) * H + o] = sum;
    }
  }
}

// The pair form (moe_experts.h). Block (x, p): features [4x, 4x + 4) of
// pair p, a warp each; two k-steps of both weight rows in flight a lane.
// Each warp first ranks its row's experts from the router's logits (the
// router kernel's arithmetic, held in registers: moe_top_k_choice), which
// costs less than a kernel of its own between the router and the experts;
// block (0, p) writes the pair's expert and weight for the down projection.
constexpr int kMoePairMaxExperts = 32 * 8;  // logits a warp holds, 8 a lane

// Choice j of a row's top k over E <= kMoePairMaxExperts logits, as
// moe_router_forward_kernel ranks them: the expert and its weight
// (renormalised over the k when asked). Every lane of the warp calls it.
__device__ __forceinline__ void moe_top_k_choice(const float* z, int E, int k, int j, bool renormalize,
                                                 int* expert, float* weight) {
  const int lane = threadIdx.x & 31;
  float p[kMoePairMaxExperts / 32];
  float max = -INFINITY;
#pragma unroll
  for (int i = 0; i < kMoePairMaxExperts / 32; ++i) {
    const int e = lane + 32 * i;
    p[i] = e < E ? z[e] : -INFINITY;
    max = fmaxf(max, p[i]);
  }
  max = warp_max(max);
  float total = 0;
#pragma unroll
  for (int i = 0; i < kMoePairMaxExperts / 32; ++i) {
    if (lane + 32 * i < E) total += expf(p[i] - max);
  }
  total = warp_sum(total);
#pragma unroll
  for (int i = 0; i < kMoePairMaxExperts / 32; ++i) p[i] = lane + 32 * i < E ? expf(p[i] - max) / total : 0.0f;
  float prev_p = 0, chosen_sum = 0, mine_p = 0;
  int prev_i = -1, mine_i = 0;
  for (int c = 0; c < k; ++c) {
    float best_p = -INFINITY;
    int best_i = INT_MAX;
#pragma unroll
    for (int i = 0; i < kMoePairMaxExperts / 32; ++i) {
      const int e = lane + 32 * i;
      if (e >= E) break;
      const bool after = c == 0 || moe_ranks_before(prev_p, prev_i, p[i], e);
      if (after && moe_ranks_before(p[i], e, best_p, best_i)) best_p = p[i], best_i = e;
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float other_p = __shfl_xor_sync(0xffffffffu, best_p, o);
      const int other_i = __shfl_xor_sync(0xffffffffu, best_i, o);
      if (moe_ranks_before(other_p, other_i, best_p, best_i)) best_p = other_p, best_i = other_i;
    }
    if (best_i >= E) best_i = 0, best_p = __shfl_sync(0xffffffffu, p[0], 0);  // only non-finite logits rank nothing
    prev_p = best_p, prev_i = best_i;
    chosen_sum += best_p;
    if (c == j) mine_p = best_p, mine_i = best_i;
  }
  *expert = mine_i;
  *weight = renormalize ? mine_p / chosen_sum : mine_p;
}

__global__ void moe_pairs_swiglu_kernel(Bf16Bits* h, int32_t* experts, float* weights, const Bf16Bits* x,
                                        const Bf16Bits* w_gu, const float* logits, int E, int k, bool renormalize,
                                        int H, int I) {
  begin_dependent();
  const int p = static_cast<int>(blockIdx.y);
  const int f = blockIdx.x * kMoeExpertWarps + static_cast<int>(threadIdx.x / 32);
  const int lane = threadIdx.x % 32;
  int e = 0;
  float weight = 0.0f;
  moe_top_k_choice(logits + static_cast<size_t>(p / k) * E, E, k, p % k, renormalize, &e, &weight);
  if (blockIdx.x == 0 && threadIdx.x == 0) experts[p] = e, weights[p] = weight;
  if (f >= I) return;  // whole warps
  const Bf16Bits* gate = w_gu + (static_cast<size_t>(e) * 2 * I + f) * H;
  const Bf16Bits* up = gate + static_cast<size_t>(I) * H;
  const Bf16Bits* xr = x + static_cast<size_t>(p / k) * H;
  float g = 0.0f, u = 0.0f;
  int c = lane * 8;
  for (; c + 32 * 8 < H; c += 2 * 32 * 8) {
    const uint4 g0 = __ldg(reinterpret_cast<const uint4*>(gate + c));
    const uint4 g1 = __ldg(reinterpret_cast<const uint4*>(gate + c + 32 * 8));
    const uint4 u0 = __ldg(reinterpret_cast<const uint4*>(up + c));
    const uint4 u1 = __ldg(reinterpret_cast<const uint4*>(up + c + 32 * 8));
    const uint4 x0 = *reinterpret_cast<const uint4*>(xr + c);
    const uint4 x1 = *reinterpret_cast<const uint4*>(xr + c + 32 * 8);
    float gw[8], uw[8], xv[8];
    unpack8_bf16(g0, gw), unpack8_bf16(u0, uw), unpack8_bf16(x0, xv);
#pragma unroll
    for (int j = 0; j < 8; ++j) g = fmaf(gw[j], xv[j], g), u = fmaf(uw[j], xv[j], u);
    unpack8_bf16(g1, gw), unpack8_bf16(u1, uw), unpack8_bf16(x1, xv);
#pragma unroll
    for (int j = 0; j < 8; ++j) g = fmaf(gw[j], xv[j], g), u = fmaf(uw[j], xv[j], u);
  }
  if (c < H) {
    float gw[8], uw[8], xv[8];
    unpack8_bf16(__ldg(reinterpret_cast<const uint4*>(gate + c)), gw);
    unpack8_bf16(__ldg(reinterpret_cast<const uint4*>(up + c)), uw);
    unpack8_bf16(*reinterpret_cast<const uint4*>(xr + c), xv);
#pragma unroll
    for (int j = 0; j < 8; ++j) g = fmaf(gw[j], xv[j], g), u = fmaf(uw[j], xv[j], u);
  }
  g = warp_sum(g), u = warp_sum(u);
  if (lane == 0) h[static_cast<size_t>(p) * I + f] = to_bf16_bits(g / (1.0f + __expf(-g)) * u);
}

// Block x: outputs [4x, 4x + 4), a warp each, over every row; a lane has
// its k-step of all the row's k choices in flight at once.
__global__ void moe_pairs_down_add_kernel(float* out, const Bf16Bits* h, const Bf16Bits* w_down,
                                          const int32_t* experts, const float* weights, int n, int k, int H,
                                          int I) {
  begin_dependent();
  const int o = blockIdx.x * kMoeExpertWarps + static_cast<int>(threadIdx.x / 32);
  const int lane = threadIdx.x % 32;
  if (o >= H) return;
  for (int r = 0; r < n; ++r) {
    const Bf16Bits* w[kMoePairChoices];
    float acc[kMoePairChoices];
#pragma unroll
    for (int j = 0; j < kMoePairChoices; ++j) {
      w[j] = j < k ? w_down + (static_cast<size_t>(experts[r * k + j]) * H + o) * I : nullptr;
      acc[j] = 0.0f;
    }
    const Bf16Bits* hr = h + static_cast<size_t>(r) * k * I;
    for (int c = lane * 8; c < I; c += 32 * 8) {
      uint4 wv[kMoePairChoices], hv[kMoePairChoices];
#pragma unroll
      for (int j = 0; j < kMoePairChoices; ++j) {
        if (j < k) {
          wv[j] = __ldg(reinterpret_cast<const uint4*>(w[j] + c));
          hv[j] = *reinterpret_cast<const uint4*>(hr + static_cast<size_t>(j) * I + c);
        }
      }
#pragma unroll
      for (int j = 0; j < kMoePairChoices; ++j) {
        if (j >= k) break;
        float a[8], b[8];
        unpack8_bf16(wv[j], a), unpack8_bf16(hv[j], b);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[j] = fmaf(a[i], b[i], acc[j]);
      }
    }
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kMoePairChoices; ++j) {
      if (j >= k) break;
      sum += weights[r * k + j] * warp_sum(acc[j]);
    }
    if (lane == 0) out[static_cast<size_t>(r) * H + o] += sum;
  }
}

bool moe_pairs_supported(int n, int E, int k, int H, int I) {
  return n >= 1 && n <= kMoePairRows && k >= 1 && k <= kMoePairChoices && E >= k && E <= kMoePairMaxExperts &&
         moe_experts_supported(H, I);
}

void moe_pairs_swiglu_bf16(Bf16Bits* h, int32_t* experts, float* weights, const Bf16Bits* x, const Bf16Bits* w_gu,
                           const float* logits, int n, int E, int k, bool renormalize, int H, int I,
                           CUstream_st* stream) {
  if (n <= 0) return;
  const dim3 grid((I + kMoeExpertWarps - 1) / kMoeExpertWarps, n * k);
  launch_dependent(moe_pairs_swiglu_kernel, grid, dim3(32 * kMoeExpertWarps), 0, stream, h, experts, weights, x, w_gu,
                   logits, E, k, renormalize, H, I);
}

void moe_pairs_down_add_bf16(float* out, const Bf16Bits* h, const Bf16Bits* w_down, const int32_t* experts,
                             const float* weights, int n, int k, int H, int I, CUstream_st* stream) {
  if (n <= 0) return;
  const dim3 grid((H + kMoeExpertWarps - 1) / kMoeExpertWarps);
  launch_dependent(moe_pairs_down_add_kernel, grid, dim3(32 * kMoeExpertWarps), 0, stream, out, h, w_down, experts,
                   weights, n, k, H, I);
}

void moe_experts_swiglu_bf16(Bf16Bits* h, const Bf16Bits* x, const Bf16Bits* w_gu, const int32_t* offsets,
                             const int32_t* source_rows, int E, int max_active, int H, int I, CUstream_st* stream) {
  if (max_active <= 0) return;
  const dim3 grid((I + kMoeExpertWarps - 1) / kMoeExpertWarps, max_active);
  launch_dependent(moe_experts_swiglu_kernel, grid, dim3(32 * kMoeExpertWarps), 0, stream, h, x, w_gu, offsets,
                   source_rows, E, H, I);
}

void moe_experts_down_bf16(float* ys, const Bf16Bits* h, const Bf16Bits* w_down, const int32_t* offsets, int E,
                           int max_active, int H, int I, CUstream_st* stream) {
  if (max_active <= 0) return;
  const dim3 grid((H + kMoeExpertWarps - 1) / kMoeExpertWarps, max_active);
  launch_dependent(moe_experts_down_kernel, grid, dim3(32 * kMoeExpertWarps), 0, stream, ys, h, w_down, offsets, E,
                   H, I);
}

void moe_route(float* logits, int32_t* experts, float* weights, int32_t* offsets, int32_t* source_rows,
               int32_t* slots, int n, int E, int k, bool renormalize, CUstream_st* stream) {
  if (n == 0) return;
  launch_dependent(moe_router_forward_kernel, dim3(moe_warp_blocks(n)), dim3(32 * kMoeRowsPerBlock), 0, stream,
                   logits, experts, weights, static_cast<const float*>(logits), n, E, k, renormalize);
  launch_dependent(moe_permute_kernel, dim3(E), dim3(kThreads), 0, stream, offsets, source_rows, slots,
                   static_cast<const int32_t*>(experts), n * k, E, k);
}

void moe_combine_rows(float* out, const float* ys, const int32_t* slots, const float* weights, int n, int k,
                      int dim, CUstream_st* stream) {
  const size_t total = static_cast<size_t>(n) * dim;
  if (total == 0) return;
  launch_dependent(moe_combine_kernel, dim3(grid_for(total)), dim3(kThreads), 0, stream, out, ys, slots, weights, n,
                   k, dim);
}

}  // namespace cohort::models::cuda
