// config.json's quantization_config: the fp8 / gptq / awq variants cohort
// loads parse with their fields, every other method or variant is refused
// naming the field; and [model] quantize's round trip at load: each
// projection carries exactly its quantize -> dequantize values, the rest is
// untouched, shards quantize as the whole weight or are refused.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "hf/config_json.h"
#include "hf/load_quantization.h"
#include "hf/quantization_config.h"
#include "models/backend.h"
#include "tests/hf/folder_checks.h"
#include "tests/hf/quantized_folder.h"

namespace cohort::hf {
namespace {

using namespace cohort::models;
using nlohmann::json;

json qwen3_with(const json& quantization) {
  json j = json::parse(config_json_text(*preset_config("tiny"), DType::kBF16));
  j["quantization_config"] = quantization;
  return j;
}

TEST(QuantizationConfig, ParsesTheVariantsCohortLoads) {
  auto fp8 = parse_quantization_config({{"quant_method", "fp8"},
                                        {"activation_scheme", "dynamic"},
                                        {"fmt", "e4m3"},
                                        {"weight_block_size", {128, 128}}});
  ASSERT_TRUE(fp8.is_ok()) << fp8.status().to_string();
  EXPECT_EQ(fp8->describe(), "fp8 e4m3 128x128 blocks");
  auto per_tensor =
      parse_quantization_config({{"quant_method", "fp8"}, {"weight_block_size", nullptr}});
  ASSERT_TRUE(per_tensor.is_ok());
  EXPECT_EQ(per_tensor->weight_block_size[0], 0);
  auto gptq = parse_quantization_config({{"quant_method", "gptq"},
                                         {"bits", 4},
                                         {"group_size", 128},
                                         {"desc_act", true},
                                         {"sym", true},
                                         {"checkpoint_format", "gptq_v2"},
                                         {"damp_percent", 0.01},
                                         {"true_sequential", true}});
  ASSERT_TRUE(gptq.is_ok()) << gptq.status().to_string();
  EXPECT_EQ(gptq->describe(), "gptq int4 g128 act-order v2");
  EXPECT_EQ(gptq->gptq_zeros, quant::GptqZeros::kStored);
  auto awq = parse_quantization_config({{"quant_method", "awq"},
                                        {"w_bit", 4},
                                        {"q_group_size", 64},
                                        {"zero_point", true},
                                        {"version", "GEMM"},
                                        {"modules_to_not_convert", {"visual"}}});
  ASSERT_TRUE(awq.is_ok()) << awq.status().to_string();
  EXPECT_EQ(awq->describe(), "awq int4 g64");
  EXPECT_EQ(awq->modules_to_not_convert, std::vector<std::string>{"visual"});
  // Through config.json as every job kind reads it.
  EXPECT_TRUE(parse_config_json(
                  qwen3_with({{"quant_method", "gptq"}, {"bits", 4}, {"group_size", -1}}).dump())
                  .is_ok());
}

TEST(QuantizationConfig, UnsupportedMethodsAndVariantsAreRefusedNamingTheField) {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}},
       "quant_method \"bitsandbytes\" is not supported"},
      {{{"quant_method", "compressed-tensors"}}, "quant_method \"compressed-tensors\""},
      {{{"quant_method", "gptq"}, {"bits", 3}}, "quantization_config.bits is 3"},
      {{{"quant_method", "gptq"}, {"bits", 4}, {"checkpoint_format", "marlin"}},
       "checkpoint_format \"marlin\""},
      {{{"quant_method", "gptq"}, {"group_size", 0}}, "group_size must be positive or -1"},
      {{{"quant_method", "gptq"}, {"desc_act", "yes"}}, "desc_act must be true or false"},
      {{{"quant_method", "awq"}, {"version", "gemv"}}, "version \"gemv\" is not supported"},
      {{{"quant_method", "awq"}, {"zero_point", false}}, "zero_point is false"},
      {{{"quant_method", "awq"}, {"bits", 8}}, "AWQ checkpoints are 4-bit"},
      {{{"quant_method", "fp8"}, {"activation_scheme", "static"}}, "activation_scheme \"static\""},
      {{{"quant_method", "fp8"}, {"fmt", "e5m2"}}, "fmt \"e5m2\""},
      {{{"quant_method", "fp8"}, {"weight_block_size", {128}}},
       "weight_block_size must be null or two positive"},
      {json::array({1, 2}), "quantization_config must be an object"},
  };
  for (const auto& [section, fragment] : cases) {
    auto parsed = parse_config_json(qwen3_with(section).dump());
    ASSERT_FALSE(parsed.is_ok()) << section.dump();
    EXPECT_NE(parsed.status().message().find(fragment), std::string::npos)
        << section.dump() << " -> " << parsed.status().message();
    EXPECT_NE(parsed.status().message().find("config.json"), std::string::npos);
  }
}

class QuantizeOption : public ::testing::Test {
 protected:
  std::unique_ptr<Model> tiny(ShardSpec shard = {}) {
    const TensorParallelComm noop = cohort::testing::no_collectives();
    auto m = std::move(Model::create(*preset_config("tiny"), shard, cpu_.get(), noop).value());
    m->init_weights(23);
    return m;
  }
  std::unique_ptr<Backend> cpu_ = make_cpu_backend();
};

TEST_F(QuantizeOption, ProjectionsCarryTheirRoundTripAndTheRestIsUntouched) {
  for (const char* option : {"fp8", "int8", "int4"}) {
    auto original = tiny(), quantized = tiny();
    ASSERT_TRUE(apply_quantize_option(*quantized, option, "").is_ok()) << option;
    const quant::WeightFormat format = **parse_quantize_option(option);
    int projections = 0;
    for (int g = 0; g < original->num_groups(); ++g) {
      for (const ParamSpec& p : original->layout().groups[g].params) {
        const float* before = original->params(g) + p.offset;
        const float* after = quantized->params(g) + p.offset;
        std::vector<float> want(before, before + p.numel);
        if (is_projection_weight(p.name)) {
          ++projections;
          auto q = quant::quantize(format, p.name, before, p.shape[0], p.shape[1]);
          ASSERT_TRUE(q.is_ok());
          ASSERT_TRUE(quant::dequantize(*q, want.data()).is_ok());
          EXPECT_NE(want, std::vector<float>(before, before + p.numel))
              << p.name << " unchanged by " << option;
        }
        EXPECT_EQ(std::vector<float>(after, after + p.numel), want) << p.name << " " << option;
      }
    }
    EXPECT_EQ(projections, 14);
  }
  auto m = tiny();
  EXPECT_TRUE(apply_quantize_option(*m, "none", "").is_ok());
  EXPECT_FALSE(apply_quantize_option(*m, "int3", "").is_ok());
}

// int8 / int4 groups run along rows, so q/k/v/gate/up shards (row cuts) and
// o/down shards cut at multiples of 128 columns quantize as the whole
// weight; the tiny model's o/down are 128 columns wide, so tp 2 cuts them
// inside a group and fp8's 128-row tiles inside q_proj: both refused.
TEST_F(QuantizeOption, ShardsCutInsideAGroupAreRefusedNamingTheWeight) {
  auto shard = tiny({0, 2});
  const Status int8 = apply_quantize_option(*shard, "int8", "");
  ASSERT_FALSE(int8.is_ok());
  EXPECT_NE(int8.message().find("o_proj.weight at column 64, inside a group of 128 columns"),
            std::string::npos)
      << int8.message();
  const Status fp8 = apply_quantize_option(*tiny({1, 2}), "fp8", "");
  ASSERT_FALSE(fp8.is_ok());
  EXPECT_NE(fp8.message().find("q_proj.weight at row 64, inside a group of 128 rows"),
            std::string::npos)
      << fp8.message();
}

TEST_F(QuantizeOption, RowShardsOfInt4EqualTheWholeWeightsRoundTripSliced) {
  // A config whose o/down inputs are 256 wide: tp 2 cuts them at 128.
  ModelConfig c = *preset_config("tiny");
  c.heads = 16, c.intermediate = 256;
  const TensorParallelComm noop = cohort::testing::no_collectives();
  auto whole = std::move(Model::create(c, {}, cpu_.get(), noop).value());
  whole->init_weights(5);
  ASSERT_TRUE(apply_quantize_option(*whole, "int4", "").is_ok());
  for (int rank = 0; rank < 2; ++rank) {
    auto shard = std::move(Model::create(c, {rank, 2}, cpu_.get(), noop).value());
    shard->init_weights(5);  // slice-consistent
    const Status s = apply_quantize_option(*shard, "int4", "");
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    for (int g = 1; g < shard->num_groups() - 1; ++g) {
      for (const ParamSpec& p : shard->layout().groups[g].params) {
        if (!is_projection_weight(p.name)) continue;
        const ParamSpec* full = whole->layout().groups[g].find(p.name);
        for (int64_t r = 0; r < p.shape[0]; ++r)
          for (int64_t k = 0; k < p.shape[1]; ++k) {
            const int64_t gr = p.shard_dim == ShardDim::kRows ? p.shard_begin + r : r;
            const int64_t gk = p.shard_dim == ShardDim::kCols ? p.shard_begin + k : k;
            ASSERT_EQ(shard->params(g)[p.offset + r * p.shape[1] + k],
                      whole->params(g)[full->offset + gr * full->shape[1] + gk])
                << p.name << " rank " << rank;
          }
      }
    }
  }
}

TEST_F(QuantizeOption, AnAlreadyQuantizedFolderRefusesTheOption) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("cohort_hfq_opt_" + std::to_string(::getpid())))
          .string();
  auto reference = tiny();
  testing::write_quantized_folder(
      dir, *reference,
      {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 32}, {"version", "gemm"}},
      testing::awq_store(32));
  const Status s = apply_quantize_option(*tiny(), "int8", dir);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("is already quantized (awq int4 g32); remove model.quantize"),
            std::string::npos)
      << s.message();
  auto summary = summarize_weight_formats(*preset_config("tiny"), "", "int4");
  ASSERT_TRUE(summary.is_ok());
  EXPECT_EQ(summary->describe(), "14 int4 g128, 11 f32");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cohort::hf
