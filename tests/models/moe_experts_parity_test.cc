// The graph engine's sparse-layer kernels (models/ops/moe_experts.h) against
// their CPU reference on random inputs: the router's choices and sort
// (moe_route), the experts' SwiGLU and down projections over the sorted
// rows (each block finding its expert among those with rows), and the
// weighted sum into the residual, for one decode row (a few experts
// active, most idle, of 16 and of 128 as Qwen3-30B-A3B has), a batch
// where every expert has rows, and a prefill whose experts take more rows
// than a warp handles in one pass; and the pair form decode steps of a few
// rows take; and the training backward's experts' weight gradients. Part
// of models_decode_ops_parity_test;
// skips with a message where no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "models/ops/expert_grads.h"
#include "models/ops/moe_experts.h"
#include "models/ops/moe_routing.h"
#include "tests/models/decode_parity.h"

namespace cohort::models {
namespace {

using namespace decode_parity;  // NOLINT: the shared fixture and helpers
using testing::random_vector;

struct Case {
  int n, E, k, H, I;
};

// A case's random router logits, rows and stacked experts, and the
// reference router's choices (the seeds differ by `seed`).
struct MoeInputs {
  MoeInputs(const Case& c, uint64_t seed)
      : pairs(size_t(c.n) * c.k),
        logits(random_vector(size_t(c.n) * c.E, seed, 2.0f)),
        x(to_bf16(random_vector(size_t(c.n) * c.H, seed + 1))),
        w_gu(to_bf16(random_vector(size_t(c.E) * 2 * c.I * c.H, seed + 2, 0.1f))),
        w_down(to_bf16(random_vector(size_t(c.E) * c.H * c.I, seed + 3, 0.1f))),
        probs(logits.size()),
        weights(pairs),
        experts(pairs) {
    cpu::moe_router_forward(probs.data(), experts.data(), weights.data(), nullptr, logits.data(), c.n, c.E, c.k,
                            true);
  }
  size_t pairs;
  std::vector<float> logits;
  std::vector<uint16_t> x, w_gu, w_down;
  std::vector<float> probs, weights;
  std::vector<int32_t> experts;
};

class MoeExpertsParity : public DecodeOpsParity {
 protected:
  template <typename T>
  std::vector<T> down_as(const T* p, size_t n) {
    std::vector<T> v(n);
    gpu_->copy_to_host(v.data(), p, n * sizeof(T));
    return v;
  }
};

TEST_F(MoeExpertsParity, SortedExpertsMatchTheReference) {
  // decode (1 row: 4 of 16 experts), a batch (every expert has rows), a
  // prefill (about 38 rows an expert: several passes of 8), Mixtral's 8 of 2.
  for (const Case& c : {Case{1, 16, 4, 256, 96}, Case{1, 128, 8, 256, 96}, Case{24, 16, 4, 256, 96},
                        Case{300, 64, 8, 128, 48},
                        Case{40, 8, 2, 512, 200}}) {
    SCOPED_TRACE(::testing::Message() << "n " << c.n << " E " << c.E << " k " << c.k);
    // Reference: the routing ops of moe_routing.h, then the experts.
    const auto& [pairs, logits, x, w_gu, w_down, probs, weights, experts] = MoeInputs(c, 11);
    std::vector<int32_t> offsets(c.E + 1), source(pairs), slots(pairs);
    cpu::moe_permute(offsets.data(), source.data(), slots.data(), experts.data(), c.n, c.E, c.k);
    std::vector<uint16_t> h(pairs * c.I);
    std::vector<float> ys(pairs * c.H), out(size_t(c.n) * c.H, 0.5f);
    cpu::moe_experts_swiglu(h.data(), x.data(), w_gu.data(), offsets.data(), source.data(), c.E, c.H, c.I);
    cpu::moe_experts_down(ys.data(), h.data(), w_down.data(), offsets.data(), c.E, c.H, c.I);
    cpu::moe_combine(out.data(), ys.data(), slots.data(), weights.data(), c.n, c.k, c.H);

    float* g_logits = up(logits);
    float* g_weights = up(std::vector<float>(pairs, NAN));
    float* g_ys = up(std::vector<float>(pairs * c.H, NAN));
    float* g_out = up(std::vector<float>(size_t(c.n) * c.H, 0.5f));
    int32_t* g_experts = up(std::vector<int32_t>(pairs, -1));
    int32_t* g_offsets = up(std::vector<int32_t>(c.E + 1, -1));
    int32_t* g_source = up(std::vector<int32_t>(pairs, -1));
    int32_t* g_slots = up(std::vector<int32_t>(pairs, -1));
    uint16_t* g_h = up(std::vector<uint16_t>(pairs * c.I, kBf16NaN));
    uint16_t *g_x = up(x), *g_gu = up(w_gu), *g_down = up(w_down);
    const int max_active = std::min<int>(c.E, int(pairs));
    cuda::moe_route(g_logits, g_experts, g_weights, g_offsets, g_source, g_slots, c.n, c.E, c.k, true, stream_);
    cuda::moe_experts_swiglu_bf16(g_h, g_x, g_gu, g_offsets, g_source, c.E, max_active, c.H, c.I, stream_);
    cuda::moe_experts_down_bf16(g_ys, g_h, g_down, g_offsets, c.E, max_active, c.H, c.I, stream_);
    cuda::moe_combine_rows(g_out, g_ys, g_slots, g_weights, c.n, c.k, c.H, stream_);

    EXPECT_EQ(down_as(g_experts, pairs), experts);
    EXPECT_EQ(down_as(g_offsets, size_t(c.E) + 1), offsets);
    EXPECT_EQ(down_as(g_source, pairs), source);
    EXPECT_EQ(down_as(g_slots, pairs), slots);
    // Sums in another order: h may round to the neighbouring bf16.
    EXPECT_LT(norm_relative(from_bf16(h), from_bf16(down_as(g_h, pairs * c.I))), kBf16Tol);
    EXPECT_LT(norm_relative(ys, down(g_ys, pairs * c.H)), kBf16Tol);
    EXPECT_LT(norm_relative(out, down(g_out, size_t(c.n) * c.H)), kBf16Tol);
  }
}

// The pair form of decode steps (moe_experts.h): the SwiGLU ranking each
// row's experts from the logits, each (row, choice) pair through its expert
// and the weighted sum added in the down projection, against the pair references, which are the sorted
// references' MLPs in another order (checked exactly here).
TEST_F(MoeExpertsParity, PairsMatchTheReference) {
  // Qwen3-30B-A3B's 8 of 128 at one row (H past one k-step pair), four rows,
  // Mixtral's 2 of 8 with a width that is no multiple of 256, Qwen1.5-MoE's 60.
  for (const Case& c : {Case{1, 128, 8, 768, 96}, Case{4, 16, 4, 256, 96}, Case{3, 8, 2, 520, 200},
                        Case{2, 60, 4, 256, 96}}) {
    SCOPED_TRACE(::testing::Message() << "n " << c.n << " E " << c.E << " k " << c.k << " H " << c.H);
    ASSERT_TRUE(cuda::moe_pairs_supported(c.n, c.E, c.k, c.H, c.I));
    const auto& [pairs, logits, x, w_gu, w_down, probs, weights, experts] = MoeInputs(c, 21);
    std::vector<int32_t> offsets(c.E + 1), source(pairs), slots(pairs);
    std::vector<uint16_t> h(pairs * c.I);
    std::vector<float> out(size_t(c.n) * c.H, 0.5f);
    cpu::moe_pairs_swiglu(h.data(), x.data(), w_gu.data(), experts.data(), c.n, c.k, c.H, c.I);
    cpu::moe_pairs_down_add(out.data(), h.data(), w_down.data(), experts.data(), weights.data(), c.n, c.k, c.H, c.I);
    {  // the same MLPs as the sorted references'
      cpu::moe_permute(offsets.data(), source.data(), slots.data(), experts.data(), c.n, c.E, c.k);
      std::vector<uint16_t> h_sorted(pairs * c.I);
      std::vector<float> ys(pairs * c.H), out_sorted(size_t(c.n) * c.H, 0.5f);
      cpu::moe_experts_swiglu(h_sorted.data(), x.data(), w_gu.data(), offsets.data(), source.data(), c.E, c.H, c.I);
      cpu::moe_experts_down(ys.data(), h_sorted.data(), w_down.data(), offsets.data(), c.E, c.H, c.I);
      cpu::moe_combine(out_sorted.data(), ys.data(), slots.data(), weights.data(), c.n, c.k, c.H);
      for (size_t p = 0; p < pairs; ++p) {
        ASSERT_TRUE(std::equal(h.begin() + p * c.I, h.begin() + (p + 1) * c.I, h_sorted.begin() + slots[p] * c.I));
      }
      EXPECT_LT(norm_relative(out_sorted, out), 1e-6);
    }

    float* g_logits = up(logits);
    float* g_weights = up(std::vector<float>(pairs, NAN));
    float* g_out = up(std::vector<float>(size_t(c.n) * c.H, 0.5f));
    int32_t* g_experts = up(std::vector<int32_t>(pairs, -1));
    uint16_t* g_h = up(std::vector<uint16_t>(pairs * c.I, kBf16NaN));
    uint16_t *g_x = up(x), *g_gu = up(w_gu), *g_down = up(w_down);
    cuda::moe_pairs_swiglu_bf16(g_h, g_experts, g_weights, g_x, g_gu, g_logits, c.n, c.E, c.k, true, c.H, c.I,
                                stream_);
    cuda::moe_pairs_down_add_bf16(g_out, g_h, g_down, g_experts, g_weights, c.n, c.k, c.H, c.I, stream_);

    EXPECT_EQ(down_as(g_experts, pairs), experts);
    EXPECT_LT(norm_relative(weights, down(g_weights, pairs)), 1e-6);
    EXPECT_LT(norm_relative(from_bf16(h), from_bf16(down_as(g_h, pairs * c.I))), kBf16Tol);
    EXPECT_LT(norm_relative(out, down(g_out, size_t(c.n) * c.H)), kBf16Tol);
  }
  EXPECT_FALSE(cuda::moe_pairs_supported(cuda::kMoePairRows + 1, 128, 8, 768, 96));
  EXPECT_FALSE(cuda::moe_pairs_supported(1, 128, cuda::kMoePairChoices + 1, 768, 96));
  EXPECT_FALSE(cuda::moe_pairs_supported(1, 512, 8, 768, 96));
}

// The training backward's experts' weight gradients (expert_grads.h), one
// launch over every expert, added into random fp32 gradients: experts with
// no rows, one row, rows that fill no whole stage and several stages, tiles
// cut by O and I, and a gap between the experts' gradients.
TEST_F(MoeExpertsParity, ExpertWeightGradientsMatchTheReference) {
  struct GradCase {
    int O, I;
    std::vector<int> rows;  // each expert's
  };
  for (const GradCase& c : {GradCase{200, 136, {0, 1, 37, 100, 33}}, GradCase{768, 1024, {70, 0, 130}},
                            GradCase{1024, 384, {64, 31, 96}}}) {
    SCOPED_TRACE(::testing::Message() << "O " << c.O << " I " << c.I);
    ASSERT_TRUE(cuda::expert_weight_grads_supported(c.O, c.I));
    const int E = static_cast<int>(c.rows.size());
    std::vector<int32_t> offsets(E + 1, 0);
    for (int e = 0; e < E; ++e) offsets[e + 1] = offsets[e] + c.rows[e];
    const size_t P = offsets[E], stride = size_t(c.O) * c.I + 24;
    const auto g = to_bf16(random_vector(P * c.O, 31));
    const auto x = to_bf16(random_vector(P * c.I, 32));
    const auto dw0 = random_vector(stride * E, 33);
    std::vector<float> want = dw0;
    cpu::expert_weight_grads(want.data(), stride, g.data(), x.data(), offsets.data(), E, c.O, c.I);
    float* g_dw = up(dw0);
    cuda::expert_weight_grads_bf16(g_dw, stride, up(g), up(x), up(offsets), E, c.O, c.I, stream_);
    const std::vector<float> got = down(g_dw, want.size());
    EXPECT_LT(norm_relative(want, got), 1e-5);
    for (int e = 0; e < E; ++e) {  // the gaps between the experts' gradients are untouched
      for (size_t j = size_t(c.O) * c.I; j < stride; ++j) ASSERT_EQ(got[e * stride + j], dw0[e * stride + j]);
    }
  }
  EXPECT_FALSE(cuda::expert_weight_grads_supported(200, 130));
}

}  // namespace
}  // namespace cohort::models
