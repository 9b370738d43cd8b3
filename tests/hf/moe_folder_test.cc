// Mixture-of-experts models in Hugging Face form: qwen3_moe and mixtral
// config.json as published (parameter counts), written back and read again,
// their fields refused by name when out of bounds, and the routers' and
// experts' weights under HF names through a folder and back, whole and as
// tensor-parallel slices.
#include <gtest/gtest.h>

#include <filesystem>

#include "hf/config_json.h"
#include "hf/safetensors.h"
#include "hf/weights.h"
#include "tests/hf/folder_checks.h"

namespace cohort::hf {
using namespace cohort::models;
namespace {

namespace fs = std::filesystem;
using cohort::testing::group_values;

// Qwen/Qwen3-30B-A3B's config.json (the fields cohort reads).
const char* kQwen3_30bA3b = R"({"architectures":["Qwen3MoeForCausalLM"],"attention_bias":false,
  "decoder_sparse_step":1,"head_dim":128,"hidden_act":"silu","hidden_size":2048,
  "intermediate_size":6144,"max_position_embeddings":40960,"mlp_only_layers":[],
  "model_type":"qwen3_moe","moe_intermediate_size":768,"norm_topk_prob":true,
  "num_attention_heads":32,"num_experts":128,"num_experts_per_tok":8,"num_hidden_layers":48,
  "num_key_value_heads":4,"output_router_logits":false,"rms_norm_eps":1e-06,"rope_scaling":null,
  "rope_theta":1000000.0,"router_aux_loss_coef":0.001,"sliding_window":null,
  "tie_word_embeddings":false,"use_sliding_window":false,"vocab_size":151936})";

// mistralai/Mixtral-8x7B-v0.1's.
const char* kMixtral8x7b = R"({"architectures":["MixtralForCausalLM"],"hidden_act":"silu",
  "hidden_size":4096,"intermediate_size":14336,"max_position_embeddings":32768,
  "model_type":"mixtral","num_attention_heads":32,"num_experts_per_tok":2,"num_hidden_layers":32,
  "num_key_value_heads":8,"num_local_experts":8,"output_router_logits":false,"rms_norm_eps":1e-05,
  "rope_theta":1000000.0,"router_aux_loss_coef":0.02,"sliding_window":null,
  "tie_word_embeddings":false,"vocab_size":32000})";

TEST(HfMoeConfig, ParsesQwen3MoeAndMixtralAsPublished) {
  auto q = parse_config_json(kQwen3_30bA3b, 4096);
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  EXPECT_EQ(q->num_parameters(), 30532122624);        // "30.5B in total"
  EXPECT_EQ(q->num_active_parameters(), 3353032704);  // "3.3B activated"
  EXPECT_EQ(q->num_parameters(), preset_config("qwen3-30b-a3b")->num_parameters());
  EXPECT_TRUE(q->qk_norm);
  EXPECT_TRUE(q->moe.normalize_top_k);
  EXPECT_FALSE(q->moe.aux_loss);
  EXPECT_TRUE(q->is_moe_layer(0) && q->is_moe_layer(47));
  auto m = parse_config_json(kMixtral8x7b, 4096);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->num_parameters(), 46702792704);  // Mixtral-8x7B's 46.7B
  EXPECT_EQ(m->moe.experts, 8);
  EXPECT_EQ(m->moe.expert_intermediate, 14336);
  EXPECT_TRUE(m->moe.normalize_top_k);
  EXPECT_FLOAT_EQ(m->moe.aux_loss_coef, 0.02f);
  EXPECT_FALSE(m->qk_norm);
}

TEST(HfMoeConfig, DenseLayersAndTheLoadBalancingLossRoundTrip) {
  ModelConfig c = *preset_config("tiny-moe");
  c.layers = 6;
  c.moe.sparse_step = 2;
  c.moe.dense_layers = {3};
  c.moe.normalize_top_k = false;
  c.moe.aux_loss_coef = 0.25f;
  ASSERT_TRUE(c.validate().is_ok());
  // Sparse: (l + 1) % 2 == 0 and not layer 3.
  for (int l = 0; l < c.layers; ++l) EXPECT_EQ(c.is_moe_layer(l), l == 1 || l == 5) << l;
  auto again = parse_config_json(config_json_text(c), 4096);
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_EQ(again->moe.experts, c.moe.experts);
  EXPECT_EQ(again->moe.experts_per_token, c.moe.experts_per_token);
  EXPECT_EQ(again->moe.expert_intermediate, c.moe.expert_intermediate);
  EXPECT_EQ(again->moe.sparse_step, 2);
  EXPECT_EQ(again->moe.dense_layers, std::vector<int>{3});
  EXPECT_FALSE(again->moe.normalize_top_k);
  EXPECT_TRUE(again->moe.aux_loss);
  EXPECT_FLOAT_EQ(again->moe.aux_loss_coef, 0.25f);
  EXPECT_EQ(again->num_parameters(), c.num_parameters());
  auto mixtral = parse_config_json(config_json_text(*parse_config_json(kMixtral8x7b, 4096)), 4096);
  ASSERT_TRUE(mixtral.is_ok()) << mixtral.status().to_string();
  EXPECT_EQ(mixtral->num_parameters(), 46702792704);
}

// Each bad MoE field is refused naming it (and, for sizes, the limit).
TEST(HfMoeConfig, OutOfBoundsFieldsAreRefusedByName) {
  const std::string qwen = R"("model_type":"qwen3_moe","hidden_size":64,"intermediate_size":128,)"
                           R"("num_attention_heads":4,"num_hidden_layers":2,"num_key_value_heads":2,)"
                           R"("vocab_size":512,"moe_intermediate_size":32)";
  const std::string mixtral = R"("model_type":"mixtral","hidden_size":64,"intermediate_size":128,)"
                              R"("num_attention_heads":4,"num_hidden_layers":2,"num_key_value_heads":2,)"
                              R"("vocab_size":512)";
  for (const auto& [fields, word] : std::vector<std::pair<std::string, std::string>>{
           {qwen + R"(,"num_experts":0)", "num_experts"},
           {qwen + R"(,"num_experts":100000)", "num_experts"},
           {qwen + R"(,"num_experts":8,"num_experts_per_tok":9)", "num_experts_per_tok"},
           {qwen + R"(,"num_experts":8,"num_experts_per_tok":0)", "num_experts_per_tok"},
           {qwen + R"(,"num_experts":8,"num_experts_per_tok":2.5)", "num_experts_per_tok"},
           {qwen + R"(,"num_experts":8,"moe_intermediate_size":2000000000)", "moe_intermediate_size"},
           {qwen + R"(,"num_experts":8,"decoder_sparse_step":0)", "decoder_sparse_step"},
           {qwen + R"(,"num_experts":8,"mlp_only_layers":[0,2])", "mlp_only_layers"},
           {qwen + R"(,"num_experts":8,"mlp_only_layers":"all")", "mlp_only_layers"},
           {qwen + R"(,"num_experts":8,"norm_topk_prob":"yes")", "norm_topk_prob"},
           {qwen + R"(,"num_experts":8,"output_router_logits":1)", "output_router_logits"},
           {qwen + R"(,"num_experts":8,"router_aux_loss_coef":-1)", "router_aux_loss_coef"},
           {qwen + R"(,"num_experts":8,"router_aux_loss_coef":"0.1")", "router_aux_loss_coef"},
           {mixtral + R"(,"num_local_experts":0)", "num_local_experts"},
           {mixtral + R"(,"router_jitter_noise":0.1)", "router_jitter_noise"},
           {mixtral + R"(,"sliding_window":4096)", "sliding_window"}}) {
    auto c = parse_config_json("{" + fields + "}", 4096);
    ASSERT_FALSE(c.is_ok()) << fields;
    EXPECT_NE(c.status().message().find(word), std::string::npos) << c.status().to_string();
  }
  // Experts beyond the limits are refused before anything is sized.
  // transformers 5 saves Qwen3-MoE's expert count under Mixtral's name.
  auto renamed = parse_config_json("{" + qwen + R"(,"num_local_experts":6,"num_experts_per_tok":2})", 4096);
  ASSERT_TRUE(renamed.is_ok()) << renamed.status().message();
  EXPECT_EQ(renamed->moe.experts, 6);
  auto huge = parse_config_json("{" + qwen + R"(,"num_experts":100000})", 4096);
  EXPECT_NE(huge.status().message().find("limit"), std::string::npos) << huge.status().to_string();
  // A dense model_type with experts is not a mixture of experts.
  ModelConfig dense = *preset_config("tiny");
  dense.moe.experts = 4, dense.moe.experts_per_token = 2, dense.moe.expert_intermediate = 8;
  EXPECT_NE(dense.validate().message().find("dense"), std::string::npos) << dense.validate().to_string();
  // Tensor parallelism splits every expert.
  ModelConfig odd = *preset_config("tiny-moe");
  odd.moe.expert_intermediate = 30;
  auto shard = local_dims(odd, {0, 4});
  ASSERT_FALSE(shard.is_ok());
  EXPECT_NE(shard.status().message().find("moe_intermediate_size"), std::string::npos);
}

class HfMoeFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cohort_hf_moe_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// Written under HF's names (qwen3_moe's mlp.gate / mlp.experts.e.*_proj,
// Mixtral's block_sparse_moe.gate / experts.e.w1|w3|w2; a dense layer's
// mlp.*_proj), read back bit for bit, and read as tensor-parallel slices
// that equal a shard initialised from the same seed.
TEST_F(HfMoeFolder, ExpertsRoundTripUnderHfNamesWholeAndSliced) {
  auto cpu = make_cpu_backend();
  for (const char* type : {"qwen3_moe", "mixtral"}) {
    SCOPED_TRACE(type);
    const bool mixtral = std::string(type) == "mixtral";
    ModelConfig c = *preset_config("tiny-moe");
    c.model_type = type;
    c.qk_norm = !mixtral;
    if (mixtral) c.intermediate = c.moe.expert_intermediate;
    else c.moe.dense_layers = {0};
    const fs::path dir = dir_ / type;
    auto a = std::move(Model::create(c, {}, cpu.get()).value());
    a->init_weights(8);
    ASSERT_TRUE(save_model_folder(*a, dir.string(), DType::kF32).is_ok());
    auto ckpt = SafetensorsCheckpoint::open(dir.string());
    ASSERT_TRUE(ckpt.is_ok());
    const std::vector<std::string> names =
        mixtral ? std::vector<std::string>{"model.layers.0.block_sparse_moe.gate.weight",
                                           "model.layers.1.block_sparse_moe.experts.7.w1.weight",
                                           "model.layers.1.block_sparse_moe.experts.7.w3.weight",
                                           "model.layers.1.block_sparse_moe.experts.0.w2.weight"}
                : std::vector<std::string>{"model.layers.0.mlp.gate_proj.weight",
                                           "model.layers.1.mlp.gate.weight",
                                           "model.layers.1.mlp.experts.7.gate_proj.weight",
                                           "model.layers.1.mlp.experts.7.up_proj.weight",
                                           "model.layers.1.mlp.experts.0.down_proj.weight"};
    for (const std::string& name : names) EXPECT_TRUE(ckpt->contains(name)) << name;
    EXPECT_FALSE(ckpt->contains("model.layers.1.mlp.gate_proj.weight"));
    auto b = load_model(dir.string(), {}, cpu.get());
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    EXPECT_EQ((*b)->config().model_type, type);
    EXPECT_EQ((*b)->config().moe.dense_layers, c.moe.dense_layers);
    for (int g = 0; g < a->num_groups(); ++g) EXPECT_EQ(group_values(*a, g), group_values(**b, g));
    cohort::testing::expect_loaded_shards_are_fresh_slices(dir.string(), c, 2, 8, cpu.get());
  }
}

// A folder as transformers 5 saves it without the original format: each
// sparse layer's experts as mlp.experts.gate_up_proj [E, 2I, H] and
// mlp.experts.down_proj [E, H, I], Mixtral's router as mlp.gate.weight.
// It loads into the same parameters, whole and as tensor-parallel slices.
TEST_F(HfMoeFolder, FusedExpertTensorsLoadAsThePerExpertOnes) {
  auto cpu = make_cpu_backend();
  for (const char* type : {"qwen3_moe", "mixtral"}) {
    SCOPED_TRACE(type);
    const bool mixtral = std::string(type) == "mixtral";
    ModelConfig c = *preset_config("tiny-moe");
    c.model_type = type;
    c.qk_norm = !mixtral;
    if (mixtral) c.intermediate = c.moe.expert_intermediate;
    auto a = std::move(Model::create(c, {}, cpu.get()).value());
    a->init_weights(12);
    const int64_t E = c.moe.experts, I = c.moe.expert_intermediate, H = c.hidden;
    std::vector<std::vector<float>> storage;
    storage.reserve(4 * c.layers + 64);
    std::vector<TensorToWrite> tensors;
    for (int g = 0; g < a->num_groups(); ++g) {
      for (const ParamSpec& p : a->layout().groups[g].params) {
        const bool expert = p.name.find(".experts.") != std::string::npos;
        const bool router = p.name.find("block_sparse_moe.gate.weight") != std::string::npos;
        if (expert) continue;
        std::string name = p.name;
        if (router) name.replace(name.find("block_sparse_moe"), 16, "mlp");
        storage.emplace_back(a->params(g) + p.offset, a->params(g) + p.offset + p.numel);
        tensors.push_back({name, p.shape, storage.back().data(), DType::kF32});
      }
      if (g == 0 || g == a->layout().head_group()) continue;
      const int l = g - 1;
      const BlockTensors w = a->layout().block_tensors(l, a->params(g));
      std::vector<float> gate_up(E * 2 * I * H), down(E * H * I);
      for (int e = 0; e < E; ++e) {
        const ExpertTensors ex = a->layout().expert_tensors(w, e);
        std::copy(ex.gate, ex.gate + I * H, gate_up.begin() + e * 2 * I * H);
        std::copy(ex.up, ex.up + I * H, gate_up.begin() + (e * 2 + 1) * I * H);
        std::copy(ex.down, ex.down + H * I, down.begin() + e * H * I);
      }
      const std::string pre = "model.layers." + std::to_string(l) + ".mlp.experts.";
      storage.push_back(std::move(gate_up));
      tensors.push_back({pre + "gate_up_proj", {E, 2 * I, H}, storage.back().data(), DType::kF32});
      storage.push_back(std::move(down));
      tensors.push_back({pre + "down_proj", {E, H, I}, storage.back().data(), DType::kF32});
    }
    const fs::path dir = dir_ / type;
    fs::create_directories(dir);
    ASSERT_TRUE(write_safetensors((dir / "model.safetensors").string(), tensors).is_ok());
    ASSERT_TRUE(write_config_json(dir.string(), c, DType::kF32).is_ok());
    auto b = load_model(dir.string(), {}, cpu.get());
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    for (int g = 0; g < a->num_groups(); ++g) EXPECT_EQ(group_values(*a, g), group_values(**b, g)) << g;
    cohort::testing::expect_loaded_shards_are_fresh_slices(dir.string(), c, 2, 12, cpu.get());
  }
}

}  // namespace
}  // namespace cohort::hf
