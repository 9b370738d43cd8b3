// Mixture-of-experts decoders on the CPU reference (Qwen3-MoE with and
// without renormalised top-k weights and with a dense layer, Mixtral):
// finite-difference gradients of the whole model, routers and the
// load-balancing loss included; the load-balancing loss's value where it is
// known exactly; activation checkpointing; KV decode of a batch against the
// full forward; and that the tiny-moe preset learns.
#include <gtest/gtest.h>

#include <cmath>

#include "models/kv_cache.h"
#include "models/model.h"
#include "models/optimizer.h"
#include "tests/models/grad_check.h"
#include "tests/models/checkpointing_check.h"
#include "tests/models/random_tokens.h"

namespace cohort::models {
namespace {

struct MoeVariant {
  const char* name;
  const char* model_type;
  bool normalize, aux_loss;
  std::vector<int> dense_layers;
};

void PrintTo(const MoeVariant& v, std::ostream* os) { *os << v.name; }

ModelConfig moe_config(const MoeVariant& v) {
  ModelConfig c = *preset_config("tiny");
  c.hidden = 16, c.heads = 4, c.kv_heads = 2, c.head_dim = 4, c.intermediate = 24;
  c.vocab_size = 32, c.max_seq = 16;
  c.model_type = v.model_type;
  c.qk_norm = c.model_type == "qwen3_moe";
  c.moe.experts = 4, c.moe.experts_per_token = 2, c.moe.expert_intermediate = 8;
  c.moe.normalize_top_k = v.normalize;
  c.moe.dense_layers = v.dense_layers;
  c.moe.aux_loss = v.aux_loss;
  c.moe.aux_loss_coef = 0.5f;  // large, so that its gradient shows in every router's
  if (c.model_type == "mixtral") c.intermediate = c.moe.expert_intermediate;
  return c;
}

using cohort::testing::expect_checkpointing_keeps_the_gradients;
using cohort::testing::random_tokens;

class MoeGrad : public ::testing::TestWithParam<MoeVariant> {};

// A top-k choice that flips between loss(x + h) and loss(x - h) is a jump,
// not a slope: such coordinates show as central differences at h and h/2
// that disagree, and are left out (a few at most; the test says how many).
TEST_P(MoeGrad, WholeModelMatchesFiniteDifferences) {
  const ModelConfig c = moe_config(GetParam());
  ASSERT_TRUE(c.validate().is_ok()) << c.validate().to_string();
  auto backend = make_cpu_backend();
  auto model = std::move(Model::create(c, {}, backend.get()).value());
  model->init_weights(7, 0.3f);
  const int B = 2, T = 5;
  auto tokens = random_tokens(B * T, c.vocab_size, 1);
  auto targets = random_tokens(B * T, c.vocab_size, 2);
  targets[3] = kIgnoreIndex;
  model->zero_grads();
  const LossSum l = model->forward(tokens.data(), targets.data(), B, T);
  ASSERT_EQ(l.count, B * T - 1);
  model->backward(1.0f / l.count);
  std::mt19937 rng(3);
  size_t checked = 0, jumps = 0;
  for (int g = 0; g < model->num_groups(); ++g) {
    const ParamGroup& group = model->layout().groups[g];
    std::vector<float> params(model->params(g), model->params(g) + group.numel);
    std::vector<size_t> idx;
    for (int i = 0; i < 12; ++i) idx.push_back(rng() % group.numel);
    for (const ParamSpec& p : group.params) idx.push_back(p.offset + rng() % p.numel);
    auto loss = [&] {
      std::copy(params.begin(), params.end(), model->params(g));
      return model->forward(tokens.data(), targets.data(), B, T).mean();
    };
    const auto wide = testing::numeric_gradient(params, loss, idx, 1e-2f);
    const auto narrow = testing::numeric_gradient(params, loss, idx, 5e-3f);
    std::vector<float> grads(model->grads(g), model->grads(g) + group.numel);
    std::vector<double> numeric, analytic;
    for (size_t i = 0; i < idx.size(); ++i) {
      if (std::fabs(wide[i] - narrow[i]) > 0.05 * std::fabs(narrow[i]) + 2e-3) {
        ++jumps;
        continue;
      }
      numeric.push_back(narrow[i]), analytic.push_back(grads[idx[i]]);
    }
    checked += numeric.size();
    EXPECT_LT(testing::relative_error(numeric, analytic), 3e-2) << group.name;
    std::copy(params.begin(), params.end(), model->params(g));
  }
  EXPECT_LE(jumps * 10, checked) << jumps << " routing jumps among " << checked << " coordinates";
}

INSTANTIATE_TEST_SUITE_P(
    Routers, MoeGrad,
    ::testing::Values(MoeVariant{"qwen3_moe_normalized_aux_dense_first", "qwen3_moe", true, true, {0}},
                      MoeVariant{"qwen3_moe_unnormalized", "qwen3_moe", false, false, {}},
                      MoeVariant{"mixtral_aux", "mixtral", true, true, {}}),
    [](const auto& info) { return std::string(info.param.name); });

// With zero routers every probability is 1/E and every token takes experts
// 0..k-1 (ties go to the lower index), so transformers' loss is exactly
// E * sum_{e<k} 1 * (1/E) = k: the mean loss rises by coef * k.
TEST(Moe, TheLoadBalancingLossIsTransformersOnUniformRouters) {
  const MoeVariant v{"aux", "qwen3_moe", true, true, {}};
  double mean[2] = {};
  for (bool aux : {false, true}) {
    ModelConfig c = moe_config(v);
    c.moe.aux_loss = aux;
    auto backend = make_cpu_backend();
    auto model = std::move(Model::create(c, {}, backend.get()).value());
    model->init_weights(9, 0.3f);
    for (int l = 0; l < c.layers; ++l) {
      auto router = model->param_view("model.layers." + std::to_string(l) + ".mlp.gate.weight");
      ASSERT_TRUE(router.is_ok());
      std::fill(router->f32(), router->f32() + router->numel(), 0.0f);
    }
    const auto tokens = random_tokens(12, c.vocab_size, 4);
    mean[aux] = model->forward(tokens.data(), tokens.data(), 2, 6).mean();
  }
  const ModelConfig c = moe_config(v);
  EXPECT_NEAR(mean[1] - mean[0], c.moe.aux_loss_coef * c.moe.experts_per_token, 1e-5);
}

// Checkpointing changes what is kept, never what is computed: the loss and
// every gradient of a sparse model equal the run that keeps everything, bit
// for bit, over two steps, in less memory.
TEST(Moe, ActivationCheckpointingGivesTheSameGradientsInLessMemory) {
  ModelConfig c = moe_config({"ckpt", "qwen3_moe", true, true, {1}});
  c.layers = 3;
  expect_checkpointing_keeps_the_gradients(c, 0.3f);
}

// Two sequences prefilled together, then decoded together (each step routes
// a batch of tokens), give the full forward's logits at every position.
TEST(Moe, BatchedKvDecodeGivesTheFullForwardsLogits) {
  for (const char* type : {"qwen3_moe", "mixtral"}) {
    SCOPED_TRACE(type);
    const ModelConfig c = moe_config({"decode", type, true, false, {}});
    auto backend = make_cpu_backend();
    auto model = std::move(Model::create(c, {}, backend.get()).value());
    model->init_weights(21, 0.3f);
    const int T = 12, V = c.vocab_size, prompt = 5;
    const std::vector<std::vector<int32_t>> seqs = {random_tokens(T, V, 60), random_tokens(T, V, 61)};
    std::vector<std::vector<float>> full;
    for (const auto& s : seqs) {
      model->forward(s.data(), nullptr, 1, T);
      full.emplace_back(model->logits(), model->logits() + static_cast<size_t>(T) * V);
    }
    auto cache = std::move(KvCache::create(*model, 2, T).value());
    std::vector<float> got(2 * V);
    model->prefill_batch(cache, {0, 1}, {{seqs[0].begin(), seqs[0].begin() + prompt},
                                         {seqs[1].begin(), seqs[1].begin() + prompt}}, got.data());
    for (int t = prompt - 1; t < T; ++t) {
      if (t >= prompt) {
        const int slots[2] = {0, 1};
        const int32_t next[2] = {seqs[0][t], seqs[1][t]};
        model->decode(cache, slots, next, 2, got.data());
      }
      for (int b = 0; b < 2; ++b) {
        for (int v = 0; v < V; ++v) {
          ASSERT_NEAR(got[b * V + v], full[b][static_cast<size_t>(t) * V + v], 1e-4)
              << "sequence " << b << " position " << t;
        }
      }
    }
  }
}

TEST(Moe, TinyMoePresetLearnsARepeatingSequence) {
  const ModelConfig c = *preset_config("tiny-moe");
  auto backend = make_cpu_backend();
  auto model = std::move(Model::create(c, {}, backend.get()).value());
  model->init_weights(3);
  AdamWConfig opt_config;
  opt_config.lr = 3e-3f;
  AdamW opt(*model, opt_config);
  const int B = 4, T = 32;
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      tokens[b * T + t] = static_cast<int32_t>("hello cohort! "[(b * 3 + t) % 14]);
      targets[b * T + t] = static_cast<int32_t>("hello cohort! "[(b * 3 + t + 1) % 14]);
    }
  }
  double first = 0, last = 0;
  for (int step = 0; step < 25; ++step) {
    model->zero_grads();
    const LossSum l = model->forward(tokens.data(), targets.data(), B, T);
    model->backward(1.0f / l.count);
    opt.clip_grad_norm(1.0f);
    opt.step();
    if (step == 0) first = l.mean();
    last = l.mean();
  }
  // Cross-entropy of a uniform guess, plus coef * (about k) for the
  // load-balancing loss of near-uniform routers.
  EXPECT_NEAR(first, std::log(256.0) + c.moe.aux_loss_coef * c.moe.experts_per_token, 0.1);
  EXPECT_LT(last, first * 0.5);
}

}  // namespace
}  // namespace cohort::models
