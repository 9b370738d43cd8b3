// The tiny decoder on CPU: finite-difference gradients of the whole model in
// its three family variants, gradient accumulation, hook order, and that a
// few AdamW steps learn.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "models/counter_random.h"
#include "models/model.h"
#include "models/param_init.h"
#include "models/optimizer.h"
#include "tests/models/grad_check.h"
#include "tests/models/checkpointing_check.h"
#include "tests/models/random_tokens.h"

namespace cohort::models {
namespace {

struct Variant {
  const char* name;
  bool qk_norm, tied, bias;
};

ModelConfig variant_config(const Variant& v) {
  ModelConfig c = *preset_config("tiny");
  c.hidden = 16, c.heads = 4, c.kv_heads = 2, c.head_dim = 4, c.intermediate = 24;
  c.vocab_size = 32, c.max_seq = 16;
  c.qk_norm = v.qk_norm, c.tie_embeddings = v.tied, c.attention_bias = v.bias;
  return c;
}

using cohort::testing::expect_checkpointing_keeps_the_gradients;
using cohort::testing::random_tokens;

class ModelGrad : public ::testing::TestWithParam<Variant> {};

TEST_P(ModelGrad, WholeModelMatchesFiniteDifferences) {
  const ModelConfig c = variant_config(GetParam());
  auto backend = make_cpu_backend();
  auto model = std::move(Model::create(c, {}, backend.get()).value());
  model->init_weights(7, 0.3f);
  // Biases start at zero in HF; give them values so their gradient path is exercised.
  const int B = 2, T = 5;
  auto tokens = random_tokens(B * T, c.vocab_size, 1);
  auto targets = random_tokens(B * T, c.vocab_size, 2);
  targets[3] = kIgnoreIndex;
  model->zero_grads();
  const LossSum l = model->forward(tokens.data(), targets.data(), B, T);
  ASSERT_EQ(l.count, B * T - 1);
  model->backward(1.0f / l.count);
  std::mt19937 rng(3);
  for (int g = 0; g < model->num_groups(); ++g) {
    const size_t n = model->layout().groups[g].numel;
    std::vector<float> params(model->params(g), model->params(g) + n);
    std::vector<size_t> idx;
    for (int i = 0; i < 12; ++i) idx.push_back(rng() % n);
    for (const ParamSpec& p : model->layout().groups[g].params) idx.push_back(p.offset);
    auto loss = [&] {
      std::copy(params.begin(), params.end(), model->params(g));
      return model->forward(tokens.data(), targets.data(), B, T).mean();
    };
    const auto numeric = testing::numeric_gradient(params, loss, idx, 1e-2f);
    std::vector<float> grads(model->grads(g), model->grads(g) + n);
    EXPECT_LT(testing::relative_error(numeric, testing::pick(grads, idx)), 3e-2)
        << model->layout().groups[g].name;
    std::copy(params.begin(), params.end(), model->params(g));
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ModelGrad,
                         ::testing::Values(Variant{"qwen3", true, false, false},
                                           Variant{"llama_tied", false, true, false},
                                           Variant{"qwen2_bias", false, false, true}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Model, MicroBatchesAccumulateToTheFullBatchGradient) {
  const ModelConfig c = variant_config({"q", true, false, false});
  auto backend = make_cpu_backend();
  auto full = std::move(Model::create(c, {}, backend.get()).value());
  auto accum = std::move(Model::create(c, {}, backend.get()).value());
  full->init_weights(11);
  accum->init_weights(11);
  const int B = 4, T = 6;
  auto tokens = random_tokens(B * T, c.vocab_size, 5), targets = random_tokens(B * T, 32, 6);
  const LossSum lf = full->forward(tokens.data(), targets.data(), B, T);
  full->backward(1.0f / lf.count);
  const float scale = 1.0f / (B * T);
  LossSum la;
  for (int half = 0; half < 2; ++half) {
    const int off = half * (B / 2) * T;
    LossSum part = accum->forward(tokens.data() + off, targets.data() + off, B / 2, T);
    accum->backward(scale);
    la.sum += part.sum, la.count += part.count;
  }
  EXPECT_NEAR(lf.mean(), la.mean(), 1e-5);
  for (int g = 0; g < full->num_groups(); ++g) {
    for (size_t i = 0; i < full->layout().groups[g].numel; ++i) {
      ASSERT_NEAR(full->grads(g)[i], accum->grads(g)[i], 1e-6) << g << " " << i;
    }
  }
}

// Checkpointing changes what is kept, never what is computed: in each
// family variant, the loss and every gradient equal the run that keeps
// everything, bit for bit (the CPU backend is deterministic), over two
// steps so that recomputation after a reused arena is covered; the
// activation memory shrinks selective < none and full < selective.
TEST(Model, ActivationCheckpointingGivesTheSameGradientsInLessMemory) {
  for (const Variant& v : {Variant{"qwen3", true, true, false}, Variant{"qwen2", false, false, true}}) {
    SCOPED_TRACE(v.name);
    ModelConfig c = variant_config(v);
    c.layers = 3;
    expect_checkpointing_keeps_the_gradients(c);
  }
  ActivationCheckpointing mode{};
  EXPECT_TRUE(parse_activation_checkpointing("selective", &mode));
  EXPECT_EQ(mode, ActivationCheckpointing::kSelective);
  EXPECT_FALSE(parse_activation_checkpointing("partial", &mode));
}

// The LM head in chunks (including a last chunk shorter than the others)
// gives the loss and gradients of the whole head up to summation order (the
// head's weight gradient adds chunk by chunk), in a smaller arena; a
// forward without targets is refused while chunking is on.
TEST(Model, ChunkedLmHeadGivesTheWholeHeadsLossAndGradients) {
  const ModelConfig c = variant_config({"qwen3", true, true, false});
  auto backend = make_cpu_backend();
  const int B = 3, T = 8;
  const auto tokens = random_tokens(B * T, c.vocab_size, 50), targets = random_tokens(B * T, c.vocab_size, 51);
  std::vector<std::vector<float>> want;
  size_t whole_bytes = 0;
  for (int chunk : {0, 5, 24, 100}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    auto model = std::move(Model::create(c, {}, backend.get()).value());
    model->init_weights(19);
    model->set_lm_head_chunk_tokens(chunk);
    const LossSum loss = model->forward(tokens.data(), targets.data(), B, T);
    model->backward(1.0f / loss.count);
    std::vector<std::vector<float>> got = {{static_cast<float>(loss.sum)}};
    for (int g = 0; g < model->num_groups(); ++g) {
      got.emplace_back(model->grads(g), model->grads(g) + model->layout().groups[g].numel);
    }
    if (chunk == 0) {
      want = got, whole_bytes = model->activation_bytes();
      continue;
    }
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      for (size_t j = 0; j < got[i].size(); ++j) {
        ASSERT_NEAR(got[i][j], want[i][j], 1e-5 * (1 + std::fabs(want[i][j]))) << "buffer " << i << " at " << j;
      }
    }
    if (chunk == 5) {
      EXPECT_LT(model->activation_bytes(), whole_bytes);
      // (COHORT_CHECK logs to stdout, which death tests do not capture.)
      EXPECT_DEATH(model->forward(tokens.data(), nullptr, B, T), "");
    }
  }
}

TEST(Model, ParameterViewsAreTypedSlicesOfTheFlatBuffers) {
  const ModelConfig c = variant_config({"q", true, false, false});
  auto backend = make_cpu_backend();
  auto model = std::move(Model::create(c, {}, backend.get()).value());
  auto q = model->param_view("model.layers.1.self_attn.q_proj.weight");
  ASSERT_TRUE(q.is_ok());
  EXPECT_EQ(q->shape, (std::vector<int64_t>{c.q_dim(), c.hidden}));
  const ParamSpec* spec = model->layout().groups[2].find("model.layers.1.self_attn.q_proj.weight");
  EXPECT_EQ(q->f32(), model->params(2) + spec->offset);
  EXPECT_EQ(model->grad_view("lm_head.weight")->numel(), int64_t{c.vocab_size} * c.hidden);
  EXPECT_EQ(model->param_view("nope").status().code(), StatusCode::kNotFound);
}

TEST(Model, HooksRunAroundEveryGroupInOrder) {
  const ModelConfig c = variant_config({"q", true, true, false});
  auto backend = make_cpu_backend();
  auto model = std::move(Model::create(c, {}, backend.get()).value());
  model->init_weights(1);
  std::vector<std::pair<char, int>> events;
  ModelHooks hooks;
  hooks.before_forward = [&](int g) { events.emplace_back('f', g); };
  hooks.after_backward = [&](int g) { events.emplace_back('b', g); };
  model->set_hooks(hooks);
  auto tokens = random_tokens(8, 32, 1);
  model->forward(tokens.data(), tokens.data(), 1, 8);
  model->backward(1.0f);
  const std::vector<std::pair<char, int>> want = {{'f', 0}, {'f', 1}, {'f', 2}, {'f', 3},
                                                  {'b', 3}, {'b', 2}, {'b', 1}, {'b', 0}};
  EXPECT_EQ(events, want);
  EXPECT_GT(model->activation_bytes(), 8u * 64 * 2 * sizeof(float));
}

TEST(Model, TinyPresetLearnsARepeatingSequence) {
  const ModelConfig c = *preset_config("tiny");
  auto backend = make_cpu_backend();
  auto model = std::move(Model::create(c, {}, backend.get()).value());
  model->init_weights(3);
  AdamWConfig opt_config;
  opt_config.lr = 3e-3f;
  AdamW opt(*model, opt_config);
  const int B = 8, T = 64;
  std::vector<int32_t> data(B * (T + 1));
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<int32_t>("hello cohort! "[i % 14]);
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      tokens[b * T + t] = data[b * 3 + t];
      targets[b * T + t] = data[b * 3 + t + 1];
    }
  }
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    model->zero_grads();
    const LossSum l = model->forward(tokens.data(), targets.data(), B, T);
    model->backward(1.0f / l.count);
    const double norm = opt.clip_grad_norm(1.0f);
    EXPECT_GT(norm, 0.0);
    opt.step();
    if (step == 0) first = l.mean();
    last = l.mean();
  }
  EXPECT_NEAR(first, std::log(256.0), 0.1);
  EXPECT_LT(last, first * 0.5);
}

// fill_normal draws whole index pairs at once (counter_normal_pair): every
// value is still counter_normal of its global index, bit for bit, where a
// shard or a thread's chunk cuts a pair, in a slice of 2^21 values that
// several threads fill and small ones that one does.
TEST(ParamInit, NormalFillsAreTheCounterNormalOfEachGlobalIndex) {
  const uint64_t stream = 0x1234567;
  for (const auto& [rows, cols, dim, begin] :
       {std::tuple<int64_t, int64_t, ShardDim, int64_t>{5, 6, ShardDim::kReplicated, 0},
        {4, 3, ShardDim::kCols, 3},  // odd columns from an odd start: pairs cut at every row
        {3, 8, ShardDim::kRows, 5},
        {2048, 1024, ShardDim::kCols, 1}}) {
    ParamSpec p;
    p.name = "w", p.shape = {rows, cols}, p.shard_dim = dim, p.shard_begin = begin;
    p.global_shape = {dim == ShardDim::kRows ? rows + begin + 1 : rows, dim == ShardDim::kCols ? cols + begin + 2 : cols};
    p.numel = size_t(rows * cols);
    std::vector<float> got(p.numel);
    fill_normal(got.data(), p, stream, 0.5f);
    size_t differ = 0;
    for (size_t i = 0; i < p.numel; ++i) differ += got[i] != 0.5f * counter_normal(stream, global_index(p, i));
    EXPECT_EQ(differ, 0u) << rows << " x " << cols << " shard at " << begin;
  }
}

// Model::init_weights fills each group in pieces of a tensor over the cores
// (fill_normal_range); any cut gives fill_normal's values, so a seed's
// weights do not depend on how they were drawn.
TEST(ParamInit, RangesCutAnywhereGiveTheWholeFill) {
  ParamSpec p;
  p.name = "w", p.shape = {7, 9}, p.global_shape = {7, 12}, p.shard_dim = ShardDim::kCols, p.shard_begin = 3;
  p.numel = 63;
  std::vector<float> whole(p.numel);
  fill_normal(whole.data(), p, 99, 0.02f);
  for (size_t piece : {1, 2, 5, 9, 64}) {
    std::vector<float> cut(p.numel, NAN);
    for (size_t begin = 0; begin < p.numel; begin += piece)
      fill_normal_range(cut.data(), p, 99, 0.02f, begin, std::min(p.numel, begin + piece));
    EXPECT_EQ(cut, whole) << "pieces of " << piece;
  }
}

// A seeded model's matrices are fill_normal's draws of their own streams,
// whichever pieces its group was cut into over the cores: on the tiny MoE
// preset, many small expert matrices in one group.
TEST(ParamInit, SeededModelMatricesAreEachTheirOwnNormalFill) {
  auto backend = make_cpu_backend();
  auto model = std::move(Model::create(*preset_config("tiny-moe"), {}, backend.get()).value());
  const uint64_t seed = 7;
  model->init_weights(seed);
  size_t matrices = 0;
  for (int g = 0; g < model->num_groups(); ++g) {
    for (const ParamSpec& p : model->layout().groups[g].params) {
      if (p.shape.size() != 2 || p.name.find("norm") != std::string::npos) continue;
      std::vector<float> want(p.numel);
      fill_normal(want.data(), p, splitmix64(seed) ^ hash_name(p.name), 0.02f);
      const float* got = model->params(g) + p.offset;
      EXPECT_TRUE(std::equal(want.begin(), want.end(), got)) << p.name;
      ++matrices;
    }
  }
  EXPECT_GT(matrices, 20u);
}

}  // namespace
}  // namespace cohort::models
