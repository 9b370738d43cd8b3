// LoRA adapters on the CPU reference: finite-difference gradients of A and B
// (with and without rsLoRA, and through dropout, whose masks are
// deterministic), a frozen base that gets no gradient and never changes,
// fresh adapters that leave the base's logits alone, the merged weights that
// give the adapted logits, activation checkpointing, KV decode, and
// tensor-parallel shards that reproduce the unsharded adapters.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "models/kv_cache.h"
#include "models/lora.h"
#include "models/optimizer.h"
#include "tests/models/grad_check.h"
#include "tests/models/tp_group.h"
#include "tests/models/random_tokens.h"

namespace cohort::models {
namespace {

ModelConfig small_config(bool qk_norm = true, bool tied = false, bool bias = false) {
  ModelConfig c = *preset_config("tiny");
  c.hidden = 16, c.heads = 4, c.kv_heads = 2, c.head_dim = 4, c.intermediate = 24;
  c.vocab_size = 32, c.max_seq = 16;
  c.qk_norm = qk_norm, c.tie_embeddings = tied, c.attention_bias = bias;
  return c;
}

LoraConfig all_linear(int rank, double alpha, bool rslora, double dropout = 0.0) {
  LoraConfig l;
  l.rank = rank, l.alpha = alpha, l.use_rslora = rslora, l.dropout = dropout;
  l.targets.assign(std::begin(kAllLoraTargets), std::end(kAllLoraTargets));
  l.base_dtype = DType::kF32;
  return l;
}

using cohort::testing::random_tokens;

// A frozen base (no gradient buffers) with adapters attached.
struct Adapted {
  std::unique_ptr<Backend> backend = make_cpu_backend();
  std::unique_ptr<Model> model;
  std::unique_ptr<LoraAdapters> lora;
  Adapted(const ModelConfig& c, const LoraConfig& l, ShardSpec shard = {},
          TensorParallelComm tp = {}) {
    model =
        std::move(Model::create(c, shard, backend.get(), tp, Model::Buffers::kParamsOnly).value());
    model->init_weights(7, 0.3f);
    lora = std::move(LoraAdapters::create(*model, l).value());
    lora->init(9);
    model->set_lora(lora.get());
  }
  // B starts at zero; give it values so every gradient path carries signal.
  void randomize_b(uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 0.3f);
    for (int g = 0; g < lora->num_groups(); ++g)
      for (const ParamSpec& p : lora->layout().groups[g].params)
        if (p.name.find("lora_B") != std::string::npos)
          for (size_t i = 0; i < p.numel; ++i) lora->params(g)[p.offset + i] = dist(rng);
  }
};

struct GradCase {
  const char* name;
  bool rslora;
  double dropout;
  bool qk_norm, tied, bias;
};

void PrintTo(const GradCase& c, std::ostream* os) {
  *os << c.name;
}

class LoraGrad : public ::testing::TestWithParam<GradCase> {};

// Dropout's masks depend on (seed, pass) only: with the pass fixed, the loss
// is a deterministic function of the adapters and finite differences apply.
TEST_P(LoraGrad, AdaptersMatchFiniteDifferences) {
  const GradCase gc = GetParam();
  Adapted m(small_config(gc.qk_norm, gc.tied, gc.bias), all_linear(4, 6.0, gc.rslora, gc.dropout));
  m.randomize_b(3);
  m.lora->begin_training_pass(1234, 5);
  const int B = 2, T = 5;
  auto tokens = random_tokens(B * T, 32, 1), targets = random_tokens(B * T, 32, 2);
  targets[3] = kIgnoreIndex;
  m.lora->zero_grads();
  const LossSum l = m.model->forward(tokens.data(), targets.data(), B, T);
  m.model->backward(1.0f / l.count);
  for (int g = 0; g < m.model->num_groups(); ++g)
    EXPECT_EQ(m.model->grads(g), nullptr) << "the base is frozen";
  std::mt19937 rng(4);
  for (int g = 0; g < m.lora->num_groups(); ++g) {
    const ParamGroup& group = m.lora->layout().groups[g];
    if (group.numel == 0) continue;
    std::vector<float> params(m.lora->params(g), m.lora->params(g) + group.numel);
    std::vector<size_t> idx;
    for (const ParamSpec& p : group.params)
      for (int i = 0; i < 3; ++i) idx.push_back(p.offset + rng() % p.numel);
    auto loss = [&] {
      std::copy(params.begin(), params.end(), m.lora->params(g));
      return m.model->forward(tokens.data(), targets.data(), B, T).mean();
    };
    const auto numeric = testing::numeric_gradient(params, loss, idx, 1e-2f);
    std::vector<float> grads(m.lora->grads(g), m.lora->grads(g) + group.numel);
    EXPECT_LT(testing::relative_error(numeric, testing::pick(grads, idx)), 3e-2) << group.name;
    std::copy(params.begin(), params.end(), m.lora->params(g));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Variants, LoraGrad,
    ::testing::Values(GradCase{"qwen3", false, 0.0, true, false, false},
                      GradCase{"qwen3_rslora", true, 0.0, true, false, false},
                      GradCase{"llama_tied", false, 0.0, false, true, false},
                      GradCase{"qwen2_bias_rslora", true, 0.0, false, false, true},
                      GradCase{"qwen3_dropout", false, 0.3, true, false, false}),
    [](const auto& info) { return std::string(info.param.name); });

// Adapters on a mixture of experts' MLPs are refused, naming what works.
TEST(Lora, ExpertMlpsAreRefusedAttentionIsAdapted) {
  auto backend = make_cpu_backend();
  auto model = Model::create(*preset_config("tiny-moe"), {}, backend.get(), {}, Model::Buffers::kParamsOnly);
  ASSERT_TRUE(model.is_ok()) << model.status().message();
  auto refused = LoraAdapters::create(**model, all_linear(4, 8, false));
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("mixtures of experts"), std::string::npos) << refused.status().message();
  LoraConfig attention = all_linear(4, 8, false);
  attention.targets = {LoraTarget::kQ, LoraTarget::kV};
  EXPECT_TRUE(LoraAdapters::create(**model, attention).is_ok());
}

// The graph engine keeps its weights-only model without any buffer and
// makes served adapters for it: adapters need only the model's shape.
TEST(Lora, AdaptersNeedOnlyTheModelsShape) {
  auto backend = make_cpu_backend();
  auto model = std::move(Model::create(*preset_config("tiny"), {}, backend.get(), {}, Model::Buffers::kStreamedBlocks).value());
  for (int g = 0; g < model->num_groups(); ++g) model->set_group_buffers(g, nullptr, nullptr);
  model->release_own_buffers();
  auto adapters = LoraAdapters::create(*model, all_linear(4, 8, false));
  ASSERT_TRUE(adapters.is_ok()) << adapters.status().message();
  (*adapters)->init(3);
  EXPECT_GT((*adapters)->layout().total_numel(), 0u);
  EXPECT_NE((*adapters)->params(1), nullptr);
}

TEST(Lora, ScaleIsAlphaOverRankOrOverItsSquareRoot) {
  LoraConfig l = all_linear(16, 32, false);
  EXPECT_FLOAT_EQ(l.scale(), 2.0f);
  l.use_rslora = true;
  EXPECT_FLOAT_EQ(l.scale(), 8.0f);
}

TEST(Lora, FreshAdaptersLeaveTheBaseModelsLogits) {
  const ModelConfig c = small_config();
  Adapted m(c, all_linear(4, 8, false));
  auto backend = make_cpu_backend();
  auto base = std::move(Model::create(c, {}, backend.get()).value());
  base->init_weights(7, 0.3f);
  const auto tokens = random_tokens(12, 32, 5);
  m.model->forward(tokens.data(), nullptr, 1, 12);
  base->forward(tokens.data(), nullptr, 1, 12);
  for (int i = 0; i < 12 * 32; ++i) ASSERT_EQ(m.model->logits()[i], base->logits()[i]) << i;
}

// PEFT's default init: A uniform in ±1/sqrt(in), B zero; gaussian: N(0, 1/r²).
TEST(Lora, InitialisationFollowsPeft) {
  const ModelConfig c = small_config();
  for (LoraInit init : {LoraInit::kKaimingUniform, LoraInit::kGaussian}) {
    LoraConfig l = all_linear(8, 8, false);
    l.init = init;
    Adapted m(c, l);
    for (int g = 0; g < m.lora->num_groups(); ++g)
      for (const ParamSpec& p : m.lora->layout().groups[g].params) {
        const float* v = m.lora->params(g) + p.offset;
        double sum2 = 0, largest = 0;
        for (size_t i = 0; i < p.numel; ++i)
          sum2 += double(v[i]) * v[i], largest = std::max(largest, double(std::fabs(v[i])));
        if (p.name.find("lora_B") != std::string::npos) {
          EXPECT_EQ(largest, 0.0) << p.name;
          continue;
        }
        const double in = double(p.shape[1]), rms = std::sqrt(sum2 / double(p.numel));
        if (init == LoraInit::kKaimingUniform) {
          EXPECT_LE(largest, 1.0 / std::sqrt(in)) << p.name;
          EXPECT_NEAR(rms, 1.0 / std::sqrt(3.0 * in), 0.25 / std::sqrt(in))
              << p.name;  // uniform's rms
        } else {
          EXPECT_NEAR(rms, 1.0 / 8, 0.04) << p.name;
        }
      }
  }
}

// W + scale · B A, put into a plain model (merge_lora_adapters), gives the
// adapted model's logits.
TEST(Lora, MergedWeightsGiveTheAdaptedLogits) {
  const ModelConfig c = small_config(false, true, true);
  Adapted m(c, all_linear(4, 8, true));
  m.randomize_b(11);
  auto backend = make_cpu_backend();
  auto merged = std::move(Model::create(c, {}, backend.get()).value());
  merged->init_weights(7, 0.3f);
  ASSERT_TRUE(merge_lora_adapters(*m.lora, *merged).is_ok());
  const auto tokens = random_tokens(10, 32, 6);
  m.model->forward(tokens.data(), nullptr, 1, 10);
  merged->forward(tokens.data(), nullptr, 1, 10);
  for (int i = 0; i < 10 * 32; ++i)
    ASSERT_NEAR(m.model->logits()[i], merged->logits()[i], 2e-5) << i;
}

// AdamW over the adapters: the loss falls, the base stays bit for bit.
TEST(Lora, StepsTrainTheAdaptersAndNeverTheBase) {
  const ModelConfig c = small_config();
  Adapted m(c, all_linear(4, 8, false));
  std::vector<std::vector<float>> base_before;
  for (int g = 0; g < m.model->num_groups(); ++g)
    base_before.emplace_back(m.model->params(g),
                             m.model->params(g) + m.model->layout().groups[g].numel);
  AdamWConfig config;
  config.lr = 1e-2f;
  AdamW opt(*m.lora, *m.backend, config);
  const int B = 2, T = 8;
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) tokens[i] = i % 5, targets[i] = (i + 1) % 5;
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    m.lora->zero_grads();
    const LossSum l = m.model->forward(tokens.data(), targets.data(), B, T);
    m.model->backward(1.0f / l.count);
    opt.step();
    (step == 0 ? first : last) = l.mean();
  }
  EXPECT_LT(last, 0.7 * first);
  for (int g = 0; g < m.model->num_groups(); ++g) {
    EXPECT_EQ(m.model->grads(g), nullptr);
    const std::vector<float> now(m.model->params(g),
                                 m.model->params(g) + m.model->layout().groups[g].numel);
    EXPECT_EQ(now, base_before[g]) << m.model->layout().groups[g].name;
  }
}

// Checkpointing recomputes the adapters' forward too (and dropout draws the
// same masks): the same loss and adapter gradients in every mode.
TEST(Lora, ActivationCheckpointingGivesTheSameAdapterGradients) {
  ModelConfig c = small_config();
  c.layers = 3;
  std::vector<std::vector<float>> want;
  for (auto mode : {ActivationCheckpointing::kNone, ActivationCheckpointing::kSelective,
                    ActivationCheckpointing::kFull}) {
    SCOPED_TRACE(to_string(mode));
    Adapted m(c, all_linear(4, 8, false, 0.2));
    m.randomize_b(2);
    m.model->set_activation_checkpointing(mode);
    m.lora->zero_grads();
    std::vector<std::vector<float>> got;
    for (int step = 0; step < 2; ++step) {
      m.lora->begin_training_pass(99, step);
      const auto tokens = random_tokens(24, 32, 30 + step),
                 targets = random_tokens(24, 32, 40 + step);
      const LossSum loss = m.model->forward(tokens.data(), targets.data(), 3, 8);
      m.model->backward(1.0f / loss.count);
      got.push_back({float(loss.sum)});
    }
    for (int g = 0; g < m.lora->num_groups(); ++g)
      got.emplace_back(m.lora->grads(g), m.lora->grads(g) + m.lora->layout().groups[g].numel);
    if (want.empty())
      want = got;
    else
      EXPECT_EQ(got, want);
  }
}

// Dropout acts inside training passes only: outside one (evaluation,
// generation) the adapted logits are noiseless and repeatable; inside, the
// mask is a function of the pass.
TEST(Lora, DropoutOnlyInsideTrainingPassesAndSeededByThem) {
  Adapted m(small_config(), all_linear(4, 8, false, 0.5));
  m.randomize_b(5);
  const auto tokens = random_tokens(8, 32, 7);
  auto logits = [&] {
    m.model->forward(tokens.data(), nullptr, 1, 8);
    return std::vector<float>(m.model->logits(), m.model->logits() + 8 * 32);
  };
  const auto eval = logits();
  m.lora->begin_training_pass(1, 1);
  const auto pass1 = logits(), pass1_again = logits();
  m.lora->begin_training_pass(1, 2);
  const auto pass2 = logits();
  m.lora->end_training_pass();
  EXPECT_EQ(logits(), eval);
  EXPECT_EQ(pass1, pass1_again);
  EXPECT_NE(pass1, eval);
  EXPECT_NE(pass1, pass2);
}

TEST(Lora, DropoutMaskKeepsItsShareAndSlicesByColumn) {
  auto backend = make_cpu_backend();
  const int rows = 64, cols = 96;
  std::vector<float> x(rows * cols, 1.0f), out(rows * cols);
  DropoutMask mask{42, 0.25f, 0, cols};
  backend->dropout_forward(out.data(), x.data(), rows, cols, mask);
  int kept = 0;
  for (float v : out) {
    EXPECT_TRUE(v == 0.0f || std::fabs(v - 1.0f / 0.75f) < 1e-6f);
    kept += v != 0.0f;
  }
  EXPECT_NEAR(double(kept) / (rows * cols), 0.75, 0.03);
  // Columns [32, 64) drawn as a slice: the same elements as in the whole row.
  std::vector<float> slice(rows * 32, 1.0f), sliced(rows * 32);
  backend->dropout_forward(sliced.data(), slice.data(), rows, 32, DropoutMask{42, 0.25f, 32, cols});
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < 32; ++c) ASSERT_EQ(sliced[r * 32 + c], out[r * cols + 32 + c]);
  // Backward passes gradients through the kept elements with the same factor.
  std::vector<float> dx(rows * cols, 0.0f);
  backend->dropout_backward(dx.data(), x.data(), rows, cols, mask);
  EXPECT_EQ(dx, out);
}

// The KV cache's prefill and decode go through the same block routine, so
// they add the adapters too: the forward's logits at every position.
TEST(Lora, KvDecodeGivesTheAdaptedForwardsLogits) {
  const ModelConfig c = small_config();
  Adapted m(c, all_linear(4, 8, false));
  m.randomize_b(8);
  const int T = 10;
  const auto tokens = random_tokens(T, 32, 9);
  m.model->forward(tokens.data(), nullptr, 1, T);
  const std::vector<float> want(m.model->logits(), m.model->logits() + T * 32);
  auto cache = std::move(KvCache::create(*m.model, 1, T).value());
  std::vector<float> got(32);
  m.model->prefill(cache, 0, tokens.data(), 4, got.data());
  for (int t = 3; t < T; ++t) {
    if (t >= 4) {
      const int slot = 0;
      m.model->decode(cache, &slot, &tokens[t], 1, got.data());
    }
    for (int v = 0; v < 32; ++v) ASSERT_NEAR(got[v], want[t * 32 + v], 2e-5) << t;
  }
}

struct LoraTpCase {
  int tp, kv_heads;
};
class LoraTensorParallel : public ::testing::TestWithParam<LoraTpCase> {};

// Each shard's adapters are the slices of the unsharded ones (init is
// slice-consistent), the loss is the unsharded loss, and each shard's
// gradients are the slices of the unsharded gradients once the partial ones
// are summed over the ranks holding the same slice.
TEST_P(LoraTensorParallel, ShardsReproduceTheUnshardedAdapters) {
  const LoraTpCase tc = GetParam();
  ModelConfig c = *preset_config("tiny");
  c.kv_heads = tc.kv_heads;
  const LoraConfig l = all_linear(4, 8, false);
  const int B = 2, T = 8;
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) tokens[i] = (i * 37) % 256, targets[i] = (i * 91 + 5) % 256;
  Adapted full(c, l);
  full.randomize_b(1);  // the same values on every shard: B's values below come from the full one
  const LossSum lf = full.model->forward(tokens.data(), targets.data(), B, T);
  full.model->backward(1.0f / lf.count);

  testing::ThreadTpGroup group(tc.tp);
  std::vector<std::unique_ptr<Adapted>> shards(tc.tp);
  std::vector<LossSum> losses(tc.tp);
  group.run([&](int rank) {
    shards[rank] = std::make_unique<Adapted>(c, l, ShardSpec{rank, tc.tp}, group.comm(rank));
    Adapted& s = *shards[rank];
    for (int g = 0; g < s.lora->num_groups(); ++g)  // B: this shard's slice of the full one
      for (const ParamSpec& p : s.lora->layout().groups[g].params) {
        const ParamSpec* fp = full.lora->layout().groups[g].find(p.name);
        std::vector<float> global(full.lora->params(g) + fp->offset,
                                  full.lora->params(g) + fp->offset + fp->numel);
        for (size_t i = 0; i < p.numel; ++i) {
          const size_t r = i / p.shape[1], col = i % p.shape[1];
          const size_t gr = r + (p.shard_dim == ShardDim::kRows ? p.shard_begin : 0);
          const size_t gc = col + (p.shard_dim == ShardDim::kCols ? p.shard_begin : 0);
          const float want = global[gr * fp->shape[1] + gc];
          if (p.name.find("lora_A") != std::string::npos)
            ASSERT_EQ(s.lora->params(g)[p.offset + i], want) << p.name;
          else
            s.lora->params(g)[p.offset + i] = want;
        }
      }
    losses[rank] = s.model->forward(tokens.data(), targets.data(), B, T);
    s.model->backward(1.0f / losses[rank].count);
  });
  for (int r = 0; r < tc.tp; ++r) EXPECT_NEAR(losses[r].mean(), lf.mean(), 1e-5 * lf.mean());
  for (int g = 0; g < full.lora->num_groups(); ++g)
    for (const ParamSpec& fp : full.lora->layout().groups[g].params)
      for (int r = 0; r < tc.tp; ++r) {
        const ParamSpec* lp = shards[r]->lora->layout().groups[g].find(fp.name);
        ASSERT_NE(lp, nullptr) << fp.name;
        std::vector<float> got(lp->numel, 0.0f);
        for (int o = 0; o < tc.tp; ++o) {
          if (o != r && !lp->tp_partial_grad) continue;
          const ParamSpec* op = shards[o]->lora->layout().groups[g].find(fp.name);
          if (op->shard_begin != lp->shard_begin) continue;
          for (size_t i = 0; i < lp->numel; ++i)
            got[i] += shards[o]->lora->grads(g)[op->offset + i];
        }
        for (size_t i = 0; i < lp->numel; ++i) {
          const size_t row = i / lp->shape[1], col = i % lp->shape[1];
          const size_t gr = row + (lp->shard_dim == ShardDim::kRows ? lp->shard_begin : 0);
          const size_t gc = col + (lp->shard_dim == ShardDim::kCols ? lp->shard_begin : 0);
          const float want = full.lora->grads(g)[fp.offset + gr * fp.shape[1] + gc];
          ASSERT_NEAR(got[i], want, 2e-5 + 1e-3 * std::abs(want))
              << fp.name << " rank " << r << " " << i;
        }
      }
}

INSTANTIATE_TEST_SUITE_P(Degrees, LoraTensorParallel, ::testing::Values(LoraTpCase{2, 4}, LoraTpCase{4, 2}),
                         [](const auto& info) {
                           return "tp" + std::to_string(info.param.tp) + "_kv" +
                                  std::to_string(info.param.kv_heads);
                         });

}  // namespace
}  // namespace cohort::models
