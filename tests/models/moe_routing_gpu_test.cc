// CPU (fp32 reference) vs CUDA for the mixture-of-experts routing ops, and a
// sparse model's forward, backward and KV decode on the CUDA backend's
// op-by-op path with fp32 GEMMs. The choices and the sort must be identical
// (same probabilities up to fp32 rounding, far from any tie in these
// inputs); values agree to 1e-4. Skips with a message where no GPU is
// visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "models/kv_cache.h"
#include "models/model.h"
#include "models/ops/embedding.h"
#include "models/ops/moe_routing.h"
#include "tests/models/cuda_backend_test.h"
#include "tests/models/grad_check.h"

namespace cohort::models {
namespace {

constexpr double kFp32Tol = 1e-4;
using testing::norm_relative;
using testing::random_vector;

class MoeRoutingParity : public testing::CudaBackendTest {
 protected:
  MoeRoutingParity() : CudaBackendTest("MoE routing parity tests") {}
  std::vector<int32_t> down_i32(const int32_t* p, size_t n) {
    std::vector<int32_t> v(n);
    gpu_->copy_to_host(v.data(), p, n * sizeof(int32_t));
    return v;
  }
};

// The sort at a training micro-batch's size (8,191 tokens of 8 choices:
// runs of many pairs a thread, a ragged last run) and at a few pairs, with
// skewed choices that leave experts empty: the reference's order exactly.
TEST_F(MoeRoutingParity, SortMatchesTheReferenceFromAFewPairsToAMicroBatch) {
  struct Case {
    int n, E, k;
  };
  for (const Case c : {Case{8191, 64, 8}, Case{3, 5, 3}, Case{1, 128, 8}, Case{777, 60, 4}}) {
    SCOPED_TRACE("n " + std::to_string(c.n) + " E " + std::to_string(c.E) + " k " + std::to_string(c.k));
    const int pairs = c.n * c.k;
    std::vector<int32_t> experts(pairs);
    const auto draw = random_vector(pairs, 7 + c.n);
    for (int i = 0; i < pairs; ++i) {
      const float u = draw[i] * draw[i];  // skewed toward low experts; the top ones stay empty
      experts[i] = std::min(c.E - 1, static_cast<int>(u * c.E * 0.8f));
    }
    std::vector<int32_t> offsets(c.E + 1), source(pairs), slots(pairs);
    cpu::moe_permute(offsets.data(), source.data(), slots.data(), experts.data(), c.n, c.E, c.k);
    // The choices as the engines hold them (16-byte aligned) and one int
    // past a boundary (the backend takes any int32 array).
    std::vector<int32_t> shifted(pairs + 1, -1);
    std::copy(experts.begin(), experts.end(), shifted.begin() + 1);
    int32_t* g_shifted = up(shifted);
    const int32_t* aligned = up(experts);
    const int32_t* unaligned = g_shifted + 1;
    for (const int32_t* g_experts : {aligned, unaligned}) {
      SCOPED_TRACE(g_experts == unaligned ? "unaligned choices" : "aligned choices");
      int32_t *g_offsets = up(offsets), *g_source = up(source), *g_slots = up(slots);
      gpu_->moe_permute(g_offsets, g_source, g_slots, g_experts, c.n, c.E, c.k);
      EXPECT_EQ(down_i32(g_offsets, c.E + 1), offsets);
      EXPECT_EQ(down_i32(g_source, pairs), source);
      EXPECT_EQ(down_i32(g_slots, pairs), slots);
    }
  }
}

TEST_F(MoeRoutingParity, RouterSortAndCombineMatchTheReference) {
  const int n = 300, E = 40, k = 6, dim = 72;  // several warps, blocks and chunks
  const auto logits = random_vector(n * E, 1, 2.0f);
  const auto dweights = random_vector(n * k, 2), aux = random_vector(E, 3);
  for (bool renormalize : {false, true}) {
    SCOPED_TRACE(renormalize ? "renormalised" : "raw");
    std::vector<float> probs(n * E), weights(n * k), sums(E), dlogits(n * E, 0.5f);
    std::vector<int32_t> experts(n * k), offsets(E + 1), source(n * k), slots(n * k);
    cpu::moe_router_forward(probs.data(), experts.data(), weights.data(), sums.data(), logits.data(), n, E, k,
                            renormalize);
    cpu::moe_router_backward(dlogits.data(), dweights.data(), probs.data(), experts.data(), aux.data(), n, E, k,
                             renormalize);
    cpu::moe_permute(offsets.data(), source.data(), slots.data(), experts.data(), n, E, k);
    float *g_probs = up(logits), *g_weights = up(weights), *g_sums = up(sums);
    float *g_dlogits = up(std::vector<float>(n * E, 0.5f)), *g_dweights = up(dweights), *g_aux = up(aux);
    int32_t *g_experts = up(experts), *g_offsets = up(offsets), *g_source = up(source), *g_slots = up(slots);
    gpu_->moe_router_forward(g_probs, g_experts, g_weights, g_sums, g_probs, n, E, k, renormalize);
    gpu_->moe_router_backward(g_dlogits, g_dweights, g_probs, g_experts, g_aux, n, E, k, renormalize);
    gpu_->moe_permute(g_offsets, g_source, g_slots, g_experts, n, E, k);
    EXPECT_EQ(down_i32(g_experts, n * k), experts);
    EXPECT_LT(norm_relative(probs, down(g_probs, n * E)), kFp32Tol);
    EXPECT_LT(norm_relative(weights, down(g_weights, n * k)), kFp32Tol);
    EXPECT_LT(norm_relative(sums, down(g_sums, E)), kFp32Tol);
    EXPECT_LT(norm_relative(dlogits, down(g_dlogits, n * E)), kFp32Tol);
    EXPECT_EQ(down_i32(g_offsets, E + 1), offsets);
    EXPECT_EQ(down_i32(g_source, n * k), source);
    EXPECT_EQ(down_i32(g_slots, n * k), slots);

    const auto x = random_vector(n * dim, 4), ys = random_vector(n * k * dim, 5);
    const auto dout = random_vector(n * dim, 6);
    std::vector<float> xs(n * k * dim), out(n * dim, 1.0f), dys(n * k * dim), dw(n * k);
    cpu::gather_rows(xs.data(), x.data(), source.data(), n * k, dim);
    cpu::moe_combine(out.data(), ys.data(), slots.data(), weights.data(), n, k, dim);
    cpu::moe_combine_backward(dys.data(), dw.data(), dout.data(), ys.data(), weights.data(), slots.data(), n, k,
                              dim);
    float *g_x = up(x), *g_ys = up(ys), *g_dout = up(dout), *g_xs = up(xs);
    float *g_out = up(std::vector<float>(n * dim, 1.0f)), *g_dys = up(dys), *g_dw = up(dw);
    gpu_->gather_rows(g_xs, g_x, g_source, n * k, dim);
    gpu_->moe_combine(g_out, g_ys, g_slots, g_weights, n, k, dim);
    gpu_->moe_combine_backward(g_dys, g_dw, g_dout, g_ys, g_weights, g_slots, n, k, dim);
    EXPECT_EQ(down(g_xs, n * k * dim), xs);
    EXPECT_LT(norm_relative(out, down(g_out, n * dim)), kFp32Tol);
    EXPECT_LT(norm_relative(dys, down(g_dys, n * k * dim)), kFp32Tol);
    EXPECT_LT(norm_relative(dw, down(g_dw, n * k)), kFp32Tol);
  }
}

// The tiny-moe preset with fp32 GEMMs: loss, every gradient (routers and
// experts included) and decode logits as the CPU reference's.
TEST_F(MoeRoutingParity, TinyMoeModelTrainsAndDecodesAsTheReference) {
  const ModelConfig c = *preset_config("tiny-moe");
  auto cpu = make_cpu_backend();
  gpu_->set_matmul_precision(MatmulPrecision::kFp32);
  auto ref = std::move(Model::create(c, {}, cpu.get()).value());
  auto model = std::move(Model::create(c, {}, gpu_.get()).value());
  ref->init_weights(13);
  model->init_weights(13);
  const int B = 2, T = 16;
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) tokens[i] = (i * 37 + 5) % 256, targets[i] = (i * 53 + 1) % 256;
  const LossSum want = ref->forward(tokens.data(), targets.data(), B, T);
  ref->backward(1.0f / want.count);
  const LossSum got = model->forward(tokens.data(), targets.data(), B, T);
  model->backward(1.0f / got.count);
  EXPECT_FALSE(model->runs_fused_blocks());
  EXPECT_NEAR(got.mean(), want.mean(), 1e-4 * want.mean());
  for (int g = 0; g < ref->num_groups(); ++g) {
    const size_t n = ref->layout().groups[g].numel;
    const std::vector<float> want_grad(ref->grads(g), ref->grads(g) + n);
    EXPECT_LT(norm_relative(want_grad, down(model->grads(g), n)), 1e-3) << ref->layout().groups[g].name;
  }
  auto ref_cache = std::move(KvCache::create(*ref, 1, T).value());
  auto cache = std::move(KvCache::create(*model, 1, T).value());
  std::vector<float> want_logits(c.vocab_size), got_logits(c.vocab_size);
  ref->prefill(ref_cache, 0, tokens.data(), T, want_logits.data());
  model->prefill(cache, 0, tokens.data(), T, got_logits.data());
  EXPECT_LT(norm_relative(want_logits, got_logits), 1e-4);
}

}  // namespace
}  // namespace cohort::models
