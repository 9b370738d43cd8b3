// The graph engine's host copies of the layers (models/decode/host_layer.h)
// taken while a streamed load fills each block (Buffers::kStreamedBlocks,
// infer::load_infer_weights finishing each group as it fills: the PEFT
// adapter merged, `quantize` round-tripped) equal those taken from a model
// loaded whole and then merged and round-tripped as before: a dense layer
// and two sparse ones (router and stacked experts), bf16 and int8-packed
// projections. And the copies hold what they should: the merged, rounded
// values (they differ from the base's), the experts in the stacked layout.
#include <gtest/gtest.h>

#include "base/half_float.h"
#include "hf/load_quantization.h"
#include "hf/peft_adapter.h"
#include "hf/weights.h"
#include "infer/model_source.h"
#include "models/backend.h"
#include "models/decode/host_layer.h"
#include "tests/infer/infer_job_fixture.h"

namespace cohort::testing {
namespace {

using models::decode::HostLayer;

models::ModelConfig small_moe() {
  models::ModelConfig c;
  c.model_type = "qwen3_moe";
  c.vocab_size = 256, c.hidden = 128, c.layers = 3, c.heads = 4, c.kv_heads = 2, c.head_dim = 32;
  c.intermediate = 256, c.max_seq = 64;
  c.moe.experts = 4, c.moe.experts_per_token = 2, c.moe.expert_intermediate = 64;
  c.moe.normalize_top_k = true, c.moe.dense_layers = {0};
  return c;
}

void expect_same(const HostLayer& a, const HostLayer& b, int layer) {
  SCOPED_TRACE("layer " + std::to_string(layer));
  EXPECT_EQ(a.sparse, b.sparse);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(a.bf16[i], b.bf16[i]) << "projection " << i;
    ASSERT_EQ(a.packed[i].has_value(), b.packed[i].has_value()) << "projection " << i;
    if (a.packed[i]) {
      EXPECT_EQ(a.packed[i]->codes, b.packed[i]->codes) << "projection " << i;
      EXPECT_EQ(a.packed[i]->scales, b.packed[i]->scales) << "projection " << i;
      EXPECT_EQ(a.packed[i]->zeros, b.packed[i]->zeros) << "projection " << i;
    }
  }
  EXPECT_EQ(a.router, b.router);
  EXPECT_EQ(a.experts_gu, b.experts_gu);
  EXPECT_EQ(a.experts_down, b.experts_down);
  EXPECT_EQ(a.attn_norm, b.attn_norm);
  EXPECT_EQ(a.mlp_norm, b.mlp_norm);
  EXPECT_EQ(a.q_norm, b.q_norm);
  EXPECT_EQ(a.k_norm, b.k_norm);
}

TEST(HostLayers, AStreamedLoadTakesEachLayerAsTheWholeModelHoldsIt) {
  auto cpu = models::make_cpu_backend();
  const models::ModelConfig config = small_moe();
  auto source = std::move(models::Model::create(config, {}, cpu.get()).value());
  source->init_weights(7, 0.1f);
  const std::string base = scratch_dir("host_layer_base").string();
  ASSERT_TRUE(hf::save_model_folder(*source, base, models::DType::kF32).is_ok());
  const std::string adapter = scratch_dir("host_layer_adapter").string();
  // A mixture of experts takes adapters on its attention (models/lora.h).
  using models::LoraTarget;
  write_random_adapter(*source, base, 3, 0.2f, adapter, {LoraTarget::kQ, LoraTarget::kK, LoraTarget::kV, LoraTarget::kO});

  jobs::ModelSection section;
  section.hf_dir = base, section.adapter = adapter, section.quantize = "int8";
  ASSERT_TRUE(infer::model_streams_blocks(section));
  for (bool packed : {false, true}) {
    SCOPED_TRACE(packed ? "int8-packed projections" : "bf16 projections");
    models::decode::HostLayerFormats formats;
    if (packed) formats.projection_format = models::quant::WeightFormat::kInt8;
    // Whole: loaded, then merged and round-tripped over the whole model.
    auto whole = std::move(models::Model::create(config, {}, cpu.get(), {}, models::Model::Buffers::kParamsOnly).value());
    ASSERT_TRUE(hf::load_weights(*whole, base).is_ok());
    ASSERT_TRUE(hf::merge_peft_adapter(adapter, *whole).is_ok());
    ASSERT_TRUE(hf::quantize_round_trip(*whole, models::quant::WeightFormat::kInt8).is_ok());
    // Streamed: each block taken as it fills.
    auto streamed =
        std::move(models::Model::create(config, {}, cpu.get(), {}, models::Model::Buffers::kStreamedBlocks).value());
    std::vector<std::optional<HostLayer>> taken(config.layers);
    Status taking;
    streamed->set_group_filled_listener([&](int group, const float*) {
      const int layer = group - streamed->layout().block_group(0);
      if (layer < 0 || layer >= config.layers) return;
      auto made = models::decode::make_host_layer(*streamed, layer, formats);
      if (made.is_ok()) taken[layer] = std::move(*made);
      else taking = made.status();
    });
    ASSERT_TRUE(infer::load_infer_weights(section, 0, *streamed).is_ok());
    ASSERT_TRUE(taking.is_ok()) << taking.message();
    for (int l = 0; l < config.layers; ++l) {
      auto want = models::decode::make_host_layer(*whole, l, formats);
      ASSERT_TRUE(want.is_ok()) << want.status().message();
      ASSERT_TRUE(taken[l].has_value()) << "layer " << l << " never filled";
      expect_same(*want, *taken[l], l);
      EXPECT_EQ(taken[l]->sparse, l > 0);
      EXPECT_EQ(taken[l]->packed[HostLayer::kQkv].has_value(), packed);
    }
  }

  // What the copies hold: layer 1's expert 2 down_proj in the stacked
  // layout, and a merged projection that is not the base's.
  auto plain = std::move(models::Model::create(config, {}, cpu.get(), {}, models::Model::Buffers::kParamsOnly).value());
  ASSERT_TRUE(hf::load_weights(*plain, base).is_ok());
  auto copy = models::decode::make_host_layer(*plain, 1, {});
  ASSERT_TRUE(copy.is_ok());
  const models::ParamSpec* down =
      plain->layout().groups[plain->layout().block_group(1)].find("model.layers.1.mlp.experts.2.down_proj.weight");
  ASSERT_NE(down, nullptr);
  const float* values = plain->params(plain->layout().block_group(1)) + down->offset;
  const size_t H = config.hidden, Ie = config.moe.expert_intermediate;
  for (size_t i = 0; i < H * Ie; i += 97)
    EXPECT_EQ(copy->experts_down[2 * H * Ie + i], float_to_bf16_bits(values[i])) << i;
  auto merged = std::move(models::Model::create(config, {}, cpu.get(), {}, models::Model::Buffers::kParamsOnly).value());
  jobs::ModelSection merged_only = section;
  merged_only.quantize = "none";
  ASSERT_TRUE(infer::load_infer_weights(merged_only, 0, *merged).is_ok());
  auto merged_copy = models::decode::make_host_layer(*merged, 0, {});
  auto plain_copy = models::decode::make_host_layer(*plain, 0, {});
  ASSERT_TRUE(merged_copy.is_ok() && plain_copy.is_ok());
  EXPECT_NE(merged_copy->bf16[HostLayer::kQkv], plain_copy->bf16[HostLayer::kQkv]) << "the adapter changed nothing";
}

}  // namespace
}  // namespace cohort::testing
