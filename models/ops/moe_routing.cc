// CPU mixture-of-experts routing (see moe_routing.h): softmax and sums in
// double, the reference the CUDA kernels are compared against.
#include "models/ops/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace cohort::models::cpu {
namespace {

// The top-k order: higher probability first, the lower index on a tie.
bool ranks_before(float pa, int ia, float pb, int ib) {
  return pa > pb || (pa == pb && ia < ib);
}

}  // namespace

void moe_router_forward(float* probs, int32_t* experts, float* weights, float* prob_sums,
                        const float* logits, int n, int num_experts, int k, bool renormalize) {
  const int E = num_experts;
  std::vector<double> sums(prob_sums ? E : 0, 0.0);
  for (int t = 0; t < n; ++t) {
    const float* z = logits + static_cast<size_t>(t) * E;
    float* p = probs + static_cast<size_t>(t) * E;
    double max = z[0];
    for (int e = 1; e < E; ++e) max = std::max(max, double(z[e]));
    double total = 0;
    for (int e = 0; e < E; ++e) total += std::exp(double(z[e]) - max);
    for (int e = 0; e < E; ++e) p[e] = static_cast<float>(std::exp(double(z[e]) - max) / total);
    // Each choice is the first, in top-k order, of those after the previous.
    int32_t* chosen = experts + static_cast<size_t>(t) * k;
    float* w = weights + static_cast<size_t>(t) * k;
    double chosen_sum = 0;
    for (int j = 0; j < k; ++j) {
      int best = -1;
      for (int e = 0; e < E; ++e) {
        if (j > 0 && !ranks_before(p[chosen[j - 1]], chosen[j - 1], p[e], e)) continue;
        if (best < 0 || ranks_before(p[e], e, p[best], best)) best = e;
      }
      if (best < 0) best = 0;  // only non-finite logits rank nothing
      chosen[j] = best;
      w[j] = p[best];
      chosen_sum += p[best];
    }
    if (renormalize) {
      for (int j = 0; j < k; ++j) w[j] = static_cast<float>(w[j] / chosen_sum);
    }
    for (size_t e = 0; e < sums.size(); ++e) sums[e] += p[e];
  }
  for (size_t e = 0; e < sums.size(); ++e) prob_sums[e] = static_cast<float>(sums[e]);
}

// With the chosen probabilities q_j and S = sum_j q_j, renormalised weights
// are w_j = q_j / S, so dL/dq_i = (dw_i - sum_j dw_j w_j) / S; without,
// dL/dq_i = dw_i. Softmax: dz_e = p_e (dp_e - sum_e' p_e' dp_e').
void moe_router_backward(float* dlogits, const float* dweights, const float* probs,
                         const int32_t* experts, const float* dprob_all, int n, int num_experts,
                         int k, bool renormalize) {
  const int E = num_experts;
  std::vector<double> dp(E);
  for (int t = 0; t < n; ++t) {
    const float* p = probs + static_cast<size_t>(t) * E;
    const int32_t* chosen = experts + static_cast<size_t>(t) * k;
    const float* dw = dweights + static_cast<size_t>(t) * k;
    for (int e = 0; e < E; ++e) dp[e] = dprob_all ? dprob_all[e] : 0.0;
    double S = 0, dot_w = 0;
    for (int j = 0; j < k; ++j) S += p[chosen[j]];
    for (int j = 0; j < k; ++j) dot_w += double(dw[j]) * (p[chosen[j]] / S);
    for (int j = 0; j < k; ++j) dp[chosen[j]] += renormalize ? (dw[j] - dot_w) / S : dw[j];
    double dot_p = 0;
    for (int e = 0; e < E; ++e) dot_p += p[e] * dp[e];
    float* dz = dlogits + static_cast<size_t>(t) * E;
    for (int e = 0; e < E; ++e) dz[e] += static_cast<float>(p[e] * (dp[e] - dot_p));
  }
}

void moe_permute(int32_t* offsets, int32_t* source_rows, int32_t* slots, const int32_t* experts,
                 int n, int num_experts, int k) {
  const size_t pairs = static_cast<size_t>(n) * k;
  std::vector<int32_t> next(num_experts + 1, 0);
  for (size_t i = 0; i < pairs; ++i) next[experts[i] + 1] += 1;
  for (int e = 0; e < num_experts; ++e) next[e + 1] += next[e];
  for (int e = 0; e <= num_experts; ++e) offsets[e] = next[e];
  for (size_t i = 0; i < pairs; ++i) {
    const int32_t row = next[experts[i]]++;
    slots[i] = row;
    source_rows[row] = static_cast<int32_t>(i / k);
  }
}

void moe_combine(float* out, const float* ys, const int32_t* slots, const float* weights, int n,
                 int k, int dim) {
  for (int t = 0; t < n; ++t) {
    float* o = out + static_cast<size_t>(t) * dim;
    for (int j = 0; j < k; ++j) {
      const size_t pair = static_cast<size_t>(t) * k + j;
      const float w = weights ? weights[pair] : 1.0f;
      const float* y = ys + static_cast<size_t>(slots[pair]) * dim;
      for (int h = 0; h < dim; ++h) o[h] += w * y[h];
    }
  }
}

void moe_combine_backward(float* dys, float* dweights, const float* dout, const float* ys,
                          const float* weights, const int32_t* slots, int n, int k, int dim) {
  for (int t = 0; t < n; ++t) {
    const float* d = dout + static_cast<size_t>(t) * dim;
    for (int j = 0; j < k; ++j) {
      const size_t pair = static_cast<size_t>(t) * k + j;
      const size_t row = static_cast<size_t>(slots[pair]) * dim;
      double dot = 0;
      for (int h = 0; h < dim; ++h) {
        dys[row + h] = weights[pair] * d[h];
        dot += double(d[h]) * ys[row + h];
      }
      dweights[pair] = static_cast<float>(dot);
    }
  }
}

}  // namespace cohort::models::cpu
