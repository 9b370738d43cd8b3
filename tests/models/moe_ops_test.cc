// The CPU mixture-of-experts routing ops (models/ops/moe_routing.h): the
// router's choice and weights against hand-computed values, its backward
// and the weighted sum's by finite differences, the sort's stable order,
// and gather_rows / unweighted combine as each other's transpose; the
// graph engine's experts over sorted rows (moe_experts.h) against each
// token's own experts computed one by one.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "base/half_float.h"
#include "models/ops/embedding.h"
#include "models/ops/moe_experts.h"
#include "models/ops/moe_routing.h"
#include "tests/models/grad_check.h"

namespace cohort::models {
namespace {

using testing::numeric_gradient;
using testing::random_vector;
using testing::relative_error;

constexpr double kTol = 2e-2;

TEST(MoeRouting, RouterTakesTheTopKInOrderAndTiesGoToTheLowerExpert) {
  // Row 0: clear order 2 > 0 > 3 > 1. Row 1: experts 1 and 3 tie for first.
  const std::vector<float> logits = {1.0f, -1.0f, 2.0f, 0.5f,  //
                                     0.0f, 3.0f, -2.0f, 3.0f};
  const int n = 2, E = 4, k = 2;
  for (bool renormalize : {false, true}) {
    std::vector<float> probs(n * E), weights(n * k), sums(E);
    std::vector<int32_t> experts(n * k);
    cpu::moe_router_forward(probs.data(), experts.data(), weights.data(), sums.data(), logits.data(), n, E, k,
                            renormalize);
    EXPECT_EQ(experts, (std::vector<int32_t>{2, 0, 1, 3}));
    for (int t = 0; t < n; ++t) {
      double total = 0;
      for (int e = 0; e < E; ++e) total += std::exp(logits[t * E + e]);
      for (int e = 0; e < E; ++e) EXPECT_NEAR(probs[t * E + e], std::exp(logits[t * E + e]) / total, 1e-6);
    }
    const float chosen = probs[2] + probs[0];
    EXPECT_NEAR(weights[0], renormalize ? probs[2] / chosen : probs[2], 1e-6);
    EXPECT_NEAR(weights[1], renormalize ? probs[0] / chosen : probs[0], 1e-6);
    if (renormalize) {
      EXPECT_NEAR(weights[2], 0.5f, 1e-6);
    }
    for (int e = 0; e < E; ++e) EXPECT_NEAR(sums[e], probs[e] + probs[E + e], 1e-6);
  }
}

// Logits a whole step apart: a perturbation of 1e-2 never changes the
// choice, so the loss is smooth where it is differenced.
TEST(MoeRouting, RouterBackwardMatchesFiniteDifferencesWithAndWithoutRenormalising) {
  const int n = 3, E = 6, k = 3;
  std::vector<float> logits(n * E);
  for (int t = 0; t < n; ++t) {
    std::vector<int> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::rotate(order.begin(), order.begin() + 2 * t + 1, order.end());
    for (int e = 0; e < E; ++e) logits[t * E + e] = 0.7f * order[e] - 1.5f;
  }
  const auto r = random_vector(n * k, 5), aux = random_vector(E, 6);
  for (bool renormalize : {false, true}) {
    SCOPED_TRACE(renormalize ? "renormalised" : "raw");
    std::vector<float> probs(n * E), weights(n * k);
    std::vector<int32_t> experts(n * k), first_choice;
    // L = sum weights * r + sum probs * aux (the load-balancing term).
    auto loss = [&] {
      cpu::moe_router_forward(probs.data(), experts.data(), weights.data(), nullptr, logits.data(), n, E, k,
                              renormalize);
      if (first_choice.empty()) first_choice = experts;
      EXPECT_EQ(experts, first_choice);
      double l = 0;
      for (int i = 0; i < n * k; ++i) l += double(weights[i]) * r[i];
      for (int i = 0; i < n * E; ++i) l += double(probs[i]) * aux[i % E];
      return l;
    };
    loss();
    std::vector<float> dlogits(n * E, 0.25f);  // backward accumulates
    cpu::moe_router_backward(dlogits.data(), r.data(), probs.data(), experts.data(), aux.data(), n, E, k,
                             renormalize);
    for (float& v : dlogits) v -= 0.25f;
    EXPECT_LT(relative_error(numeric_gradient(logits, loss), testing::pick(dlogits, {})), kTol);
  }
}

TEST(MoeRouting, PermuteSortsPairsByExpertKeepingTheirOrder) {
  const int n = 4, E = 3, k = 2;
  const std::vector<int32_t> experts = {2, 0, 0, 1, 2, 1, 0, 2};  // (token, choice) pairs
  std::vector<int32_t> offsets(E + 1), source(n * k), slots(n * k);
  cpu::moe_permute(offsets.data(), source.data(), slots.data(), experts.data(), n, E, k);
  EXPECT_EQ(offsets, (std::vector<int32_t>{0, 3, 5, 8}));
  // Expert 0 takes pairs 1, 2, 6; expert 1 pairs 3, 5; expert 2 pairs 0, 4, 7.
  EXPECT_EQ(slots, (std::vector<int32_t>{5, 0, 1, 3, 6, 4, 2, 7}));
  EXPECT_EQ(source, (std::vector<int32_t>{0, 1, 3, 1, 2, 0, 2, 3}));
  // An expert no token chose has an empty range.
  const std::vector<int32_t> skewed = {0, 2, 0, 2, 2, 0, 0, 2};
  cpu::moe_permute(offsets.data(), source.data(), slots.data(), skewed.data(), n, E, k);
  EXPECT_EQ(offsets, (std::vector<int32_t>{0, 4, 4, 8}));
}

TEST(MoeRouting, CombineBackwardMatchesFiniteDifferences) {
  const int n = 3, k = 2, dim = 5;
  const std::vector<int32_t> slots = {3, 0, 5, 1, 2, 4};
  auto ys = random_vector(n * k * dim, 1), weights = random_vector(n * k, 2);
  auto dout = random_vector(n * dim, 3);
  std::vector<float> out(n * dim);
  auto loss = [&] {
    std::fill(out.begin(), out.end(), 0.0f);
    cpu::moe_combine(out.data(), ys.data(), slots.data(), weights.data(), n, k, dim);
    return testing::weighted_sum(out.data(), dout);
  };
  std::vector<float> dys(n * k * dim, 7.0f), dweights(n * k, 7.0f);  // overwritten
  cpu::moe_combine_backward(dys.data(), dweights.data(), dout.data(), ys.data(), weights.data(), slots.data(), n,
                            k, dim);
  EXPECT_LT(relative_error(numeric_gradient(ys, loss), testing::pick(dys, {})), kTol);
  EXPECT_LT(relative_error(numeric_gradient(weights, loss), testing::pick(dweights, {})), kTol);
}

// <gather(x), g> = <x, combine_unweighted(g)>: the sum of a token's rows is
// the gather's backward.
TEST(MoeRouting, UnweightedCombineIsTheGathersTranspose) {
  const int n = 3, k = 2, dim = 4;
  const std::vector<int32_t> source = {1, 0, 2, 0, 2, 1}, slots = {1, 3, 0, 5, 2, 4};
  auto x = random_vector(n * dim, 1), g = random_vector(n * k * dim, 2);
  std::vector<float> gathered(n * k * dim), back(n * dim, 0.0f);
  cpu::gather_rows(gathered.data(), x.data(), source.data(), n * k, dim);
  cpu::moe_combine(back.data(), g.data(), slots.data(), nullptr, n, k, dim);
  double left = 0, right = 0;
  for (size_t i = 0; i < g.size(); ++i) left += double(gathered[i]) * g[i];
  for (size_t i = 0; i < x.size(); ++i) right += double(x[i]) * back[i];
  EXPECT_NEAR(left, right, 1e-4);
}

// The sorted-rows form the graph engine runs, weighted back into token
// order, equals each token's k experts' SwiGLU MLPs summed by their router
// weights, with the stacked layouts: expert e's gate rows then up rows in
// w_gu [E, 2I, H], its down in w_down [E, H, I].
TEST(MoeExperts, SortedRowsGiveEachTokensWeightedExperts) {
  const int n = 7, E = 5, k = 2, H = 16, I = 8;
  auto bf16 = [](const std::vector<float>& v) {
    std::vector<uint16_t> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = float_to_bf16_bits(v[i]);
    return out;
  };
  const auto logits = random_vector(n * E, 21, 2.0f);
  const auto x = bf16(random_vector(n * H, 22)), w_gu = bf16(random_vector(E * 2 * I * H, 23, 0.3f));
  const auto w_down = bf16(random_vector(E * H * I, 24, 0.3f));
  std::vector<float> probs(n * E), weights(n * k);
  std::vector<int32_t> experts(n * k), offsets(E + 1), source(n * k), slots(n * k);
  cpu::moe_router_forward(probs.data(), experts.data(), weights.data(), nullptr, logits.data(), n, E, k, true);
  cpu::moe_permute(offsets.data(), source.data(), slots.data(), experts.data(), n, E, k);
  std::vector<uint16_t> h(n * k * I);
  std::vector<float> ys(n * k * H), out(n * H, 0.0f);
  cpu::moe_experts_swiglu(h.data(), x.data(), w_gu.data(), offsets.data(), source.data(), E, H, I);
  cpu::moe_experts_down(ys.data(), h.data(), w_down.data(), offsets.data(), E, H, I);
  cpu::moe_combine(out.data(), ys.data(), slots.data(), weights.data(), n, k, H);
  auto f = [](uint16_t b) { return bf16_bits_to_float(b); };
  for (int t = 0; t < n; ++t) {
    for (int o = 0; o < H; ++o) {
      double want = 0;
      for (int j = 0; j < k; ++j) {
        const int e = experts[t * k + j];
        double y = 0;
        for (int i = 0; i < I; ++i) {
          double g = 0, u = 0;
          for (int c = 0; c < H; ++c) {
            g += f(w_gu[(size_t(e) * 2 * I + i) * H + c]) * f(x[t * H + c]);
            u += f(w_gu[(size_t(e) * 2 * I + I + i) * H + c]) * f(x[t * H + c]);
          }
          // The kernels round h to bf16 before the down projection.
          const float hi = bf16_bits_to_float(float_to_bf16_bits(float(g / (1.0 + std::exp(-g)) * u)));
          y += f(w_down[(size_t(e) * H + o) * I + i]) * hi;
        }
        want += weights[t * k + j] * y;
      }
      EXPECT_NEAR(out[t * H + o], want, 1e-3 * (1.0 + std::abs(want))) << "token " << t << " output " << o;
    }
  }
}

}  // namespace
}  // namespace cohort::models
