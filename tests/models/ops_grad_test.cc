// Finite-difference checks of every CPU op's backward against its forward.
#include <gtest/gtest.h>

#include "models/ops/adamw.h"
#include "models/ops/attention.h"
#include "models/ops/cross_entropy.h"
#include "models/ops/embedding.h"
#include "models/ops/linear.h"
#include "models/ops/rmsnorm.h"
#include "models/ops/rope.h"
#include "models/ops/swiglu.h"
#include "tests/models/grad_check.h"

namespace cohort::models {
namespace {

using testing::numeric_gradient;
using testing::random_vector;
using testing::relative_error;
using testing::weighted_sum;

constexpr double kTol = 2e-2;

TEST(OpsGrad, RmsNormMatchesFiniteDifferences) {
  const int n = 3, dim = 8;
  auto x = random_vector(n * dim, 1), w = random_vector(dim, 2), r = random_vector(n * dim, 3);
  std::vector<float> out(n * dim), rstd(n);
  auto loss = [&] {
    cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), n, dim, 1e-6f);
    return weighted_sum(out.data(), r);
  };
  loss();
  std::vector<float> dx(n * dim, 0.5f), dw(dim, 0.25f);  // nonzero: backward must accumulate
  cpu::rmsnorm_backward(dx.data(), dw.data(), r.data(), x.data(), w.data(), rstd.data(), n, dim);
  for (float& v : dx) v -= 0.5f;
  for (float& v : dw) v -= 0.25f;
  EXPECT_LT(relative_error(numeric_gradient(x, loss), testing::pick(dx, {})), kTol);
  EXPECT_LT(relative_error(numeric_gradient(w, loss), testing::pick(dw, {})), kTol);
}

TEST(OpsGrad, LinearWithBiasMatchesFiniteDifferences) {
  const int n = 4, in = 6, out_dim = 5;
  auto x = random_vector(n * in, 1), w = random_vector(out_dim * in, 2);
  auto b = random_vector(out_dim, 3), r = random_vector(n * out_dim, 4);
  std::vector<float> y(n * out_dim);
  auto loss = [&] {
    cpu::linear_forward(y.data(), x.data(), w.data(), b.data(), n, in, out_dim);
    return weighted_sum(y.data(), r);
  };
  std::vector<float> dx(n * in), dw(out_dim * in), db(out_dim);
  cpu::linear_backward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), n, in,
                       out_dim);
  EXPECT_LT(relative_error(numeric_gradient(x, loss), testing::pick(dx, {})), kTol);
  EXPECT_LT(relative_error(numeric_gradient(w, loss), testing::pick(dw, {})), kTol);
  EXPECT_LT(relative_error(numeric_gradient(b, loss), testing::pick(db, {})), kTol);
}

TEST(OpsGrad, EmbeddingShardLooksUpOnlyItsRowsAndScattersGradients) {
  const int dim = 4, rows = 5, vocab_begin = 5;
  auto table = random_vector(rows * dim, 1);
  const std::vector<int32_t> ids = {5, 2, 9, 5};  // 2 is outside this shard
  std::vector<float> out(ids.size() * dim);
  cpu::embedding_forward(out.data(), ids.data(), table.data(), 4, dim, vocab_begin, rows);
  EXPECT_EQ(out[0], table[0]);
  EXPECT_EQ(out[dim], 0.0f);
  EXPECT_EQ(out[2 * dim + 1], table[4 * dim + 1]);
  auto r = random_vector(out.size(), 2);
  std::vector<float> dtable(table.size());
  cpu::embedding_backward(dtable.data(), r.data(), ids.data(), 4, dim, vocab_begin, rows);
  auto loss = [&] {
    cpu::embedding_forward(out.data(), ids.data(), table.data(), 4, dim, vocab_begin, rows);
    return weighted_sum(out.data(), r);
  };
  EXPECT_LT(relative_error(numeric_gradient(table, loss), testing::pick(dtable, {})), kTol);
}

TEST(OpsGrad, RopeBackwardIsTheTransposeOfForward) {
  ModelConfig c;
  c.head_dim = 8;
  c.max_seq = 16;
  const RopeTable t = make_rope_table(c);
  const int n = 3, heads = 2;
  const std::vector<int32_t> pos = {0, 7, 3};
  auto x = random_vector(n * heads * 8, 1), r = random_vector(n * heads * 8, 2);
  std::vector<float> work;
  auto loss = [&] {
    work = x;
    cpu::rope_forward(work.data(), pos.data(), n, heads, 8, t.cos.data(), t.sin.data());
    return weighted_sum(work.data(), r);
  };
  std::vector<float> dx = r;
  cpu::rope_backward(dx.data(), pos.data(), n, heads, 8, t.cos.data(), t.sin.data());
  EXPECT_LT(relative_error(numeric_gradient(x, loss), testing::pick(dx, {})), kTol);
}

TEST(OpsGrad, RopeMatchesRotateHalfAtKnownAngles) {
  ModelConfig c;
  c.head_dim = 4;
  c.rope_theta = 100.0f;
  c.max_seq = 4;
  const RopeTable t = make_rope_table(c);
  // inv_freq = {1, 0.1}; position 2: angles {2, 0.2}.
  std::vector<float> x = {1, 2, 3, 4};
  const int32_t pos = 2;
  cpu::rope_forward(x.data(), &pos, 1, 1, 4, t.cos.data(), t.sin.data());
  EXPECT_NEAR(x[0], 1 * std::cos(2.0f) - 3 * std::sin(2.0f), 1e-5);
  EXPECT_NEAR(x[1], 2 * std::cos(0.2f) - 4 * std::sin(0.2f), 1e-5);
  EXPECT_NEAR(x[2], 3 * std::cos(2.0f) + 1 * std::sin(2.0f), 1e-5);
  EXPECT_NEAR(x[3], 4 * std::cos(0.2f) + 2 * std::sin(0.2f), 1e-5);
}

TEST(OpsGrad, GroupedQueryAttentionMatchesFiniteDifferences) {
  const int B = 2, T = 5, hq = 4, hkv = 2, D = 4;
  auto q = random_vector(B * T * hq * D, 1), k = random_vector(B * T * hkv * D, 2);
  auto v = random_vector(B * T * hkv * D, 3), r = random_vector(B * T * hq * D, 4);
  std::vector<float> y(q.size()), lse(B * hq * T), scratch(attention_scratch_floats(T, hq));
  auto loss = [&] {
    cpu::attention_forward(y.data(), lse.data(), scratch.data(), q.data(), k.data(), v.data(), B, T,
                           hq, hkv, D);
    return weighted_sum(y.data(), r);
  };
  loss();
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  cpu::attention_backward(dq.data(), dk.data(), dv.data(), scratch.data(), r.data(), q.data(),
                          k.data(), v.data(), lse.data(), B, T, hq, hkv, D);
  EXPECT_LT(relative_error(numeric_gradient(q, loss), testing::pick(dq, {})), kTol);
  EXPECT_LT(relative_error(numeric_gradient(k, loss), testing::pick(dk, {})), kTol);
  EXPECT_LT(relative_error(numeric_gradient(v, loss), testing::pick(dv, {})), kTol);
}

TEST(OpsGrad, AttentionIsCausal) {
  const int T = 4, D = 2;
  auto q = random_vector(T * D, 1), k = random_vector(T * D, 2), v = random_vector(T * D, 3);
  std::vector<float> y(T * D), y2(T * D), lse(T), scratch(attention_scratch_floats(T, 1));
  cpu::attention_forward(y.data(), lse.data(), scratch.data(), q.data(), k.data(), v.data(), 1, T,
                         1, 1, D);
  k[3 * D] += 5.0f;  // changing the last key must not change earlier outputs
  v[3 * D] += 5.0f;
  cpu::attention_forward(y2.data(), lse.data(), scratch.data(), q.data(), k.data(), v.data(), 1, T,
                         1, 1, D);
  for (int i = 0; i < 3 * D; ++i) EXPECT_FLOAT_EQ(y[i], y2[i]);
  // The first query sees only the first key: lse = its scaled score.
  EXPECT_NEAR(lse[0], (q[0] * k[0] + q[1] * k[1]) / std::sqrt(2.0f), 1e-5);
  EXPECT_NE(y[3 * D], y2[3 * D]);
}

TEST(OpsGrad, CachedAttentionMatchesFullAttention) {
  const int T = 6, hq = 4, hkv = 2, D = 4, cap = 8;
  auto q = random_vector(T * hq * D, 1), k = random_vector(T * hkv * D, 2);
  auto v = random_vector(T * hkv * D, 3);
  std::vector<float> y(q.size()), lse(hq * T), scratch(attention_scratch_floats(T, hq));
  cpu::attention_forward(y.data(), lse.data(), scratch.data(), q.data(), k.data(), v.data(), 1, T,
                         hq, hkv, D);
  std::vector<float> kc(hkv * cap * D), vc(kc.size()), y2(q.size());
  cpu::kv_cache_write(kc.data(), k.data(), 4, 0, cap, hkv, D);  // prefill 4, then 2 more
  cpu::kv_cache_write(vc.data(), v.data(), 4, 0, cap, hkv, D);
  cpu::attention_cached(y2.data(), scratch.data(), q.data(), kc.data(), vc.data(), 4, 0, cap, hq,
                        hkv, D);
  cpu::kv_cache_write(kc.data(), k.data() + 4 * hkv * D, 2, 4, cap, hkv, D);
  cpu::kv_cache_write(vc.data(), v.data() + 4 * hkv * D, 2, 4, cap, hkv, D);
  cpu::attention_cached(y2.data() + 4 * hq * D, scratch.data(), q.data() + 4 * hq * D, kc.data(),
                        vc.data(), 2, 4, cap, hq, hkv, D);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], y2[i], 1e-5) << i;
}

TEST(OpsGrad, SwigluMatchesFiniteDifferences) {
  const size_t n = 12;
  auto g = random_vector(n, 1), u = random_vector(n, 2), r = random_vector(n, 3);
  std::vector<float> h(n);
  auto loss = [&] {
    cpu::swiglu_forward(h.data(), g.data(), u.data(), n);
    return weighted_sum(h.data(), r);
  };
  std::vector<float> dg(n), du(n);
  cpu::swiglu_backward(dg.data(), du.data(), r.data(), g.data(), u.data(), n);
  EXPECT_LT(relative_error(numeric_gradient(g, loss), testing::pick(dg, {})), kTol);
  EXPECT_LT(relative_error(numeric_gradient(u, loss), testing::pick(du, {})), kTol);
}

TEST(OpsGrad, CrossEntropyMatchesFiniteDifferencesAndIgnoresIndex) {
  const int n = 4, V = 7;
  auto logits = random_vector(n * V, 1, 2.0f);
  const std::vector<int32_t> targets = {3, kIgnoreIndex, 0, 6};
  std::vector<float> losses(n), scratch(3 * n), work;
  auto loss = [&] {
    work = logits;
    cpu::cross_entropy_forward_backward(losses.data(), work.data(), scratch.data(), targets.data(),
                                        n, V, 0, 0.0f, nullptr);
    double s = 0;
    for (float l : losses) s += l;
    return s * 0.5;
  };
  loss();
  EXPECT_EQ(losses[1], 0.0f);
  work = logits;
  cpu::cross_entropy_forward_backward(losses.data(), work.data(), scratch.data(), targets.data(), n,
                                      V, 0, 0.5f, nullptr);
  for (int j = 0; j < V; ++j) EXPECT_EQ(work[V + j], 0.0f);
  EXPECT_LT(relative_error(numeric_gradient(logits, loss), testing::pick(work, {})), kTol);
}

TEST(OpsGrad, AdamWFirstStepMovesByLearningRate) {
  std::vector<float> p = {1.0f, -2.0f}, g = {0.5f, -3.0f}, m(2), v(2);
  AdamWConfig c;
  c.lr = 0.1f;
  c.weight_decay = 0.0f;
  cpu::adamw_update(p.data(), g.data(), m.data(), v.data(), 2, c, 1, true);
  // Bias-corrected first step: update = lr * sign(g) (up to eps).
  EXPECT_NEAR(p[0], 0.9f, 1e-5);
  EXPECT_NEAR(p[1], -1.9f, 1e-5);
  c.weight_decay = 0.5f;
  std::vector<float> p2 = {1.0f}, g2 = {0.0f}, m2(1), v2(1);
  cpu::adamw_update(p2.data(), g2.data(), m2.data(), v2.data(), 1, c, 1, true);
  EXPECT_NEAR(p2[0], 1.0f - 0.1f * 0.5f, 1e-6);  // decoupled decay only
}

TEST(OpsGrad, ClipCoefficientFollowsTorch) {
  EXPECT_FLOAT_EQ(clip_coefficient(0.5, 1.0f), 1.0f);
  EXPECT_NEAR(clip_coefficient(4.0, 1.0f), 0.25f, 1e-6);
  EXPECT_FLOAT_EQ(clip_coefficient(4.0, 0.0f), 1.0f);
  std::vector<float> x = {3, 4};
  EXPECT_DOUBLE_EQ(cpu::sum_of_squares(x.data(), 2), 25.0);
}

}  // namespace
}  // namespace cohort::models
