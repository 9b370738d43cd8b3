// Pre-quantized Hugging Face folders (FP8 block / channel / tensor scales,
// GPTQ with and without act-order, AWQ) written by the tests' own packers
// load into the fp32 model with exactly the dequantized weights their
// definitions give, whole and as tensor-parallel shards, and the logits equal
// those of the model built from the dequantized weights; broken tensor sets
// are errors naming the tensor.
#include <gtest/gtest.h>

#include <filesystem>

#include "hf/load_quantization.h"
#include "hf/packed_projections.h"
#include "hf/weights.h"
#include "models/backend.h"
#include "tests/hf/folder_checks.h"
#include "tests/hf/quantized_folder.h"

namespace cohort::hf {
namespace {

namespace fs = std::filesystem;
using namespace cohort::models;
using testing::Fp8Scales;

class QuantizedFolder : public ::testing::Test {
 protected:
  // Also called again mid-test for a second folder: the model goes before its backend.
  void SetUp() override {
    expected_.reset();
    dir_ = fs::temp_directory_path() /
           ("cohort_hfq_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    cpu_ = make_cpu_backend();
    config_ = *preset_config("tiny");
    expected_ = std::move(Model::create(config_, {}, cpu_.get()).value());
    expected_->init_weights(17);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes the folder with `store`'s projections and checks that it loads
  // into exactly the expected parameters and logits.
  void expect_loads_exactly(const nlohmann::json& quantization,
                            const testing::ProjectionStore& store) {
    testing::write_quantized_folder(dir_.string(), *expected_, quantization, store);
    auto loaded = load_model(dir_.string(), {}, cpu_.get());
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
    for (int g = 0; g < expected_->num_groups(); ++g) {
      const size_t n = expected_->layout().groups[g].numel;
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ((*loaded)->params(g)[i], expected_->params(g)[i])
            << "group " << g << " element " << i;
    }
    const std::vector<int32_t> tokens = {1, 7, 42, 255, 3, 99, 128, 5, 17, 200, 0, 64};
    (*loaded)->forward(tokens.data(), nullptr, 2, 6);
    expected_->forward(tokens.data(), nullptr, 2, 6);
    const size_t logits = tokens.size() * size_t(config_.vocab_size);
    for (size_t i = 0; i < logits; ++i)
      ASSERT_EQ((*loaded)->logits()[i], expected_->logits()[i]) << "logit " << i;
  }

  fs::path dir_;
  std::unique_ptr<Backend> cpu_;
  ModelConfig config_;
  std::unique_ptr<Model> expected_;
};

const nlohmann::json kFp8Block = {{"quant_method", "fp8"},
                                  {"fmt", "e4m3"},
                                  {"activation_scheme", "dynamic"},
                                  {"weight_block_size", {128, 128}}};

TEST_F(QuantizedFolder, Fp8BlockScaledCheckpointLoadsItsDequantizedWeights) {
  expect_loads_exactly(kFp8Block, testing::fp8_store(Fp8Scales::kBlock128));
}

TEST_F(QuantizedFolder, Fp8PerChannelAndPerTensorScalesLoad) {
  nlohmann::json per_channel = kFp8Block;
  per_channel["weight_block_size"] = nullptr;
  expect_loads_exactly(per_channel, testing::fp8_store(Fp8Scales::kChannel));
  SetUp();
  expect_loads_exactly(per_channel, testing::fp8_store(Fp8Scales::kTensor));
}

TEST_F(QuantizedFolder, ModulesLeftUnquantizedLoadAsTheyAreStored) {
  const auto fp8 = testing::fp8_store(Fp8Scales::kBlock128);
  // modules_to_not_convert: the MLPs stay F32 in the folder.
  auto mixed = [&](const std::string& prefix, int64_t out, int64_t in, uint64_t seed,
                   std::vector<testing::RawTensor>* t) {
    return prefix.find(".mlp.") != std::string::npos ? std::vector<float>()
                                                     : fp8(prefix, out, in, seed, t);
  };
  nlohmann::json config = kFp8Block;
  config["modules_to_not_convert"] = {"mlp"};
  expect_loads_exactly(config, mixed);
}

const nlohmann::json gptq_config(bool desc_act) {
  return {{"quant_method", "gptq"}, {"bits", 4},    {"group_size", 32},
          {"desc_act", desc_act},   {"sym", false}, {"checkpoint_format", "gptq"}};
}

TEST_F(QuantizedFolder, GptqCheckpointLoadsItsDequantizedWeights) {
  expect_loads_exactly(gptq_config(false), testing::gptq_store(32, false));
}

TEST_F(QuantizedFolder, GptqActOrderCheckpointLoadsThroughGIdx) {
  expect_loads_exactly(gptq_config(true), testing::gptq_store(32, true));
}

TEST_F(QuantizedFolder, AwqCheckpointLoadsItsDequantizedWeights) {
  const nlohmann::json awq = {{"quant_method", "awq"},
                              {"bits", 4},
                              {"group_size", 32},
                              {"zero_point", true},
                              {"version", "gemm"}};
  expect_loads_exactly(awq, testing::awq_store(32));
}

// Tensor-parallel ranks dequantize only their rows (q/k/v/gate/up) or cut
// their columns from whole rows (o/down): each shard equals the same shard of
// an fp32 folder of the expected weights.
TEST_F(QuantizedFolder, TensorParallelShardsOfAGptqFolderMatchTheDequantizedModel) {
  testing::write_quantized_folder(dir_.string(), *expected_, gptq_config(true),
                                  testing::gptq_store(32, true));
  const std::string plain = dir_.string() + "_f32";
  ASSERT_TRUE(save_model_folder(*expected_, plain, DType::kF32).is_ok());
  const TensorParallelComm noop = cohort::testing::no_collectives();
  for (int rank = 0; rank < 2; ++rank) {
    auto quantized = load_model(dir_.string(), {rank, 2}, cpu_.get(), noop);
    auto reference = load_model(plain, {rank, 2}, cpu_.get(), noop);
    ASSERT_TRUE(quantized.is_ok()) << quantized.status().to_string();
    ASSERT_TRUE(reference.is_ok());
    for (int g = 0; g < (*reference)->num_groups(); ++g) {
      const size_t n = (*reference)->layout().groups[g].numel;
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ((*quantized)->params(g)[i], (*reference)->params(g)[i])
            << "rank " << rank << " group " << g;
    }
  }
  fs::remove_all(plain);
}

// What an engine keeping the weights packed uploads: each projection's
// slice in the row layout dequantizes to the parameter the loader gave the
// same rank, for GPTQ and AWQ at tp 1 and 2 and FP8 at tp 1; act-order
// GPTQ, which the layout cannot hold, gives nothing (the loaded values serve).
TEST_F(QuantizedFolder, PackedProjectionsAreTheLoadedWeightsInTheRowLayout) {
  const TensorParallelComm noop = cohort::testing::no_collectives();
  const nlohmann::json awq = {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 32}, {"zero_point", true},
                              {"version", "gemm"}};
  struct Case {
    nlohmann::json config;
    testing::ProjectionStore store;
    int max_tp;
    bool packs;
  };
  const std::vector<Case> cases = {{gptq_config(false), testing::gptq_store(32, false), 2, true},
                                   {awq, testing::awq_store(32), 2, true},
                                   {kFp8Block, testing::fp8_store(Fp8Scales::kBlock128), 1, true},
                                   {gptq_config(true), testing::gptq_store(32, true), 1, false}};
  for (const Case& c : cases) {
    SetUp();
    testing::write_quantized_folder(dir_.string(), *expected_, c.config, c.store);
    auto packed = PackedProjections::open(dir_.string());
    ASSERT_TRUE(packed.is_ok() && *packed) << c.config.dump();
    for (int tp = 1; tp <= c.max_tp; ++tp) {
      for (int rank = 0; rank < tp; ++rank) {
        auto loaded = load_model(dir_.string(), {rank, tp}, cpu_.get(), noop);
        ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
        int projections = 0;
        for (int g = 0; g < (*loaded)->num_groups(); ++g) {
          for (const ParamSpec& p : (*loaded)->layout().groups[g].params) {
            if (!is_projection_weight(p.name)) continue;
            auto w = (*packed)->read(p);
            ASSERT_TRUE(w.is_ok()) << w.status().to_string();
            ASSERT_EQ(w->has_value(), c.packs) << p.name;
            if (!c.packs) continue;
            ++projections;
            std::vector<float> values(p.numel);
            quant::dequantize(**w, values.data());
            for (size_t i = 0; i < p.numel; ++i)
              ASSERT_EQ(values[i], (*loaded)->params(g)[p.offset + i]) << p.name << " rank " << rank << " of " << tp;
          }
        }
        if (c.packs) {
          EXPECT_EQ(projections, 7 * config_.layers);
        }
      }
    }
  }
  EXPECT_EQ((*PackedProjections::open(dir_.string() + "_none")), nullptr) << "no folder, no quantization";
}

TEST_F(QuantizedFolder, TheSummaryCountsEachWeightsStoredFormat) {
  const auto fp8 = testing::fp8_store(Fp8Scales::kBlock128);
  auto attention_only = [&](const std::string& prefix, int64_t out, int64_t in, uint64_t seed,
                            std::vector<testing::RawTensor>* t) {
    return prefix.find(".mlp.") != std::string::npos ? std::vector<float>()
                                                     : fp8(prefix, out, in, seed, t);
  };
  testing::write_quantized_folder(dir_.string(), *expected_, kFp8Block, attention_only);
  auto summary = summarize_weight_formats(config_, dir_.string(), "none");
  ASSERT_TRUE(summary.is_ok()) << summary.status().to_string();
  // 2 layers x q/k/v/o in fp8; the MLPs, norms, embedding and head in f32.
  EXPECT_EQ(summary->describe(), "17 f32, 8 fp8-block 128x128");
  auto gptq_dir = dir_.string() + "_gptq";
  testing::write_quantized_folder(gptq_dir, *expected_, gptq_config(true),
                                  testing::gptq_store(32, true));
  auto gptq = summarize_weight_formats(config_, gptq_dir, "none");
  ASSERT_TRUE(gptq.is_ok()) << gptq.status().to_string();
  EXPECT_EQ(gptq->describe(), "14 gptq int4 g32 act-order, 11 f32");
  fs::remove_all(gptq_dir);
}

// Broken sets: each error names the folder's tensor and what was expected.
TEST_F(QuantizedFolder, BrokenTensorSetsAreErrorsNamingTheTensor) {
  auto store = testing::gptq_store(32, true);
  auto reshaped = [&](const std::string& prefix, int64_t out, int64_t in, uint64_t seed,
                      std::vector<testing::RawTensor>* t) {
    auto w = store(prefix, out, in, seed, t);
    if (prefix == "model.layers.1.mlp.up_proj") t->at(t->size() - 4).shape = {in / 8 / 2, out * 2};
    return w;
  };
  testing::write_quantized_folder(dir_.string(), *expected_, gptq_config(true), reshaped);
  auto loaded = load_model(dir_.string(), {}, cpu_.get());
  ASSERT_FALSE(loaded.is_ok());
  EXPECT_NE(loaded.status().message().find("model.layers.1.mlp.up_proj.qweight is I32 [4, 256]"),
            std::string::npos)
      << loaded.status().message();
  EXPECT_NE(loaded.status().message().find("needs I32 [8, 128]"), std::string::npos)
      << loaded.status().message();

  SetUp();
  auto no_g_idx = [&](const std::string& prefix, int64_t out, int64_t in, uint64_t seed,
                      std::vector<testing::RawTensor>* t) {
    auto w = store(prefix, out, in, seed, t);
    t->pop_back();
    return w;
  };
  testing::write_quantized_folder(dir_.string(), *expected_, gptq_config(true), no_g_idx);
  loaded = load_model(dir_.string(), {}, cpu_.get());
  ASSERT_FALSE(loaded.is_ok());
  EXPECT_NE(loaded.status().message().find("model.layers.0.self_attn.q_proj.g_idx is missing"),
            std::string::npos)
      << loaded.status().message();
}

TEST_F(QuantizedFolder, QuantizedTensorsWithoutAQuantizationConfigAreRefused) {
  testing::write_quantized_folder(dir_.string(), *expected_, gptq_config(false),
                                  testing::gptq_store(32, false));
  nlohmann::json config =
      nlohmann::json::parse(config_json_text(config_, DType::kF32));  // no quantization_config
  std::ofstream(dir_ / "config.json") << config.dump();
  auto loaded = load_model(dir_.string(), {}, cpu_.get());
  ASSERT_FALSE(loaded.is_ok());
  EXPECT_NE(loaded.status().message().find("q_proj.qweight is in the checkpoint but config.json's "
                                           "quantization_config declares neither gptq nor awq"),
            std::string::npos)
      << loaded.status().message();

  SetUp();
  auto scaleless = [](const std::string& prefix, int64_t out, int64_t in, uint64_t seed,
                      std::vector<testing::RawTensor>* t) {
    auto w = testing::fp8_store(Fp8Scales::kBlock128)(prefix, out, in, seed, t);
    t->pop_back();
    return w;
  };
  testing::write_quantized_folder(dir_.string(), *expected_, kFp8Block, scaleless);
  loaded = load_model(dir_.string(), {}, cpu_.get());
  ASSERT_FALSE(loaded.is_ok());
  EXPECT_NE(loaded.status().message().find("is F8_E4M3 but neither"), std::string::npos)
      << loaded.status().message();
}

}  // namespace
}  // namespace cohort::hf
