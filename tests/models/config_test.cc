// Config validation, tensor-parallel local dimensions, the parameter layout,
// and range-wise AdamW (what ZeRO shards call) agreeing with the whole-group step.
#include <gtest/gtest.h>

#include "models/optimizer.h"
#include "models/param_layout.h"

namespace cohort::models {
namespace {

TEST(Config, TinySplitsEvenlyAcrossTensorParallelTwoAndFour) {
  const ModelConfig c = *preset_config("tiny");
  EXPECT_TRUE(c.validate().is_ok());
  for (int tp : {1, 2, 4}) {
    for (int r = 0; r < tp; ++r) {
      auto d = local_dims(c, {r, tp});
      ASSERT_TRUE(d.is_ok()) << d.status().to_string();
      EXPECT_EQ(d->heads * tp, c.heads);
      EXPECT_EQ(d->kv_heads * tp, c.kv_heads);
      EXPECT_EQ(d->vocab * tp, c.vocab_size);
      EXPECT_EQ(d->vocab_begin, r * d->vocab);
      EXPECT_FALSE(d->kv_replicated);
    }
  }
}

TEST(Config, MoreRanksThanKvHeadsReplicatesTheSharedHead) {
  ModelConfig c = *preset_config("tiny");  // 8 query heads, 4 KV heads
  c.kv_heads = 2;
  auto d = local_dims(c, {3, 4});  // query heads 6, 7 -> KV head 1
  ASSERT_TRUE(d.is_ok());
  EXPECT_TRUE(d->kv_replicated);
  EXPECT_EQ(d->kv_heads, 1);
  EXPECT_EQ(d->kv_head_begin, 1);
  EXPECT_EQ(d->head_begin, 6);
}

TEST(Config, ErrorsNameTheFieldThatDoesNotSplit) {
  const ModelConfig c = *preset_config("tiny");
  auto d = local_dims(c, {0, 3});
  ASSERT_FALSE(d.is_ok());
  EXPECT_NE(d.status().message().find("num_attention_heads"), std::string::npos);
  EXPECT_FALSE(local_dims(c, {4, 4}).is_ok());
  ModelConfig odd = c;
  odd.head_dim = 15;
  EXPECT_FALSE(odd.validate().is_ok());
  EXPECT_FALSE(preset_config("gpt-5").is_ok());
}

TEST(ModelConfig, LlamaPresetsHaveThePublishedParameterCounts) {
  // meta-llama/Llama-3.1-8B and -70B: 8,030,261,248 and 70,553,706,496.
  EXPECT_EQ(preset_config("llama-3.1-8b")->num_parameters(), int64_t{8030261248});
  EXPECT_EQ(preset_config("llama-3.1-70b")->num_parameters(), int64_t{70553706496});
}

TEST(ParamLayout, GroupsFollowTheDocumentedOrderAndShards) {
  const ModelConfig c = *preset_config("tiny");
  const ParamLayout full = *make_param_layout(c, {});
  ASSERT_EQ(full.groups.size(), static_cast<size_t>(c.layers + 2));
  EXPECT_EQ(full.groups[0].params[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(full.groups[1].params[0].name, "model.layers.0.input_layernorm.weight");
  EXPECT_EQ(full.groups.back().params[1].name, "lm_head.weight");
  EXPECT_EQ(full.total_numel(), static_cast<size_t>(c.num_parameters()));
  const ParamLayout shard = *make_param_layout(c, {1, 2});
  const ParamSpec* o = shard.groups[1].find("model.layers.0.self_attn.o_proj.weight");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->shard_dim, ShardDim::kCols);
  EXPECT_EQ(o->shard_begin, c.q_dim() / 2);
  EXPECT_EQ(o->shape, (std::vector<int64_t>{c.hidden, c.q_dim() / 2}));
  EXPECT_TRUE(shard.groups[1].find("model.layers.0.self_attn.q_norm.weight")->tp_partial_grad);
  EXPECT_FALSE(shard.groups[1].find("model.layers.0.input_layernorm.weight")->weight_decay);
  size_t offset = 0;
  for (const ParamSpec& p : shard.groups[1].params) {
    EXPECT_EQ(p.offset, offset);
    offset += p.numel;
  }
  EXPECT_EQ(offset, shard.groups[1].numel);
}

TEST(AdamW, RangeUpdatesEqualTheWholeGroupUpdate) {
  const ModelConfig c = *preset_config("tiny");
  const ParamLayout layout = *make_param_layout(c, {});
  const ParamGroup& g = layout.groups[1];
  std::vector<float> p(g.numel), grad(g.numel), m(g.numel), v(g.numel);
  for (size_t i = 0; i < g.numel; ++i)
    p[i] = 0.01f * (i % 97), grad[i] = 0.001f * (i % 13) - 0.006f;
  auto p2 = p, m2 = m, v2 = v;
  auto backend = make_cpu_backend();
  AdamWConfig config;
  adamw_update_range(*backend, g, 0, g.numel, p.data(), grad.data(), m.data(), v.data(), config, 3);
  // Three ranges that cut through parameter boundaries, as ZeRO shards do.
  const size_t cuts[] = {0, g.numel / 3 + 5, 2 * g.numel / 3 + 1, g.numel};
  for (int s = 0; s < 3; ++s) {
    const size_t b = cuts[s], e = cuts[s + 1];
    adamw_update_range(*backend, g, b, e, p2.data() + b, grad.data() + b, m2.data() + b,
                       v2.data() + b, config, 3);
  }
  EXPECT_EQ(p, p2);
  EXPECT_EQ(m, m2);
  // The norm (first parameter) was not decayed: zero gradient leaves it.
  std::vector<float> q = {1.0f}, zero = {0.0f}, mm = {0.0f}, vv = {0.0f};
  adamw_update_range(*backend, g, 0, 1, q.data(), zero.data(), mm.data(), vv.data(), config, 1);
  EXPECT_EQ(q[0], 1.0f);
}

}  // namespace
}  // namespace cohort::models
