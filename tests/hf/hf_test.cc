// safetensors and Hugging Face folders: round trips in f32/bf16, sharded
// folders, tensor-parallel slice loading, config.json parsing and errors.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "hf/weights.h"
#include "tests/hf/folder_checks.h"
#include "hf/config_json.h"
#include "hf/safetensors.h"

namespace cohort::hf {
using namespace cohort::models;
namespace {

namespace fs = std::filesystem;
using cohort::testing::group_values;

class HfFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cohort_hf_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(HfFolder, F32RoundTripIsExact) {
  auto cpu = make_cpu_backend();
  ModelConfig c = *preset_config("tiny");
  auto a = std::move(Model::create(c, {}, cpu.get()).value());
  a->init_weights(3);
  ASSERT_TRUE(save_model_folder(*a, dir_.string(), DType::kF32).is_ok());
  auto b = load_model(dir_.string(), {}, cpu.get());
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  EXPECT_EQ((*b)->config().num_parameters(), c.num_parameters());
  for (int g = 0; g < a->num_groups(); ++g) EXPECT_EQ(group_values(*a, g), group_values(**b, g));
}

TEST_F(HfFolder, Bf16RoundTripRoundsToNearestEven) {
  auto cpu = make_cpu_backend();
  ModelConfig c = *preset_config("tiny");
  c.tie_embeddings = true;
  auto a = std::move(Model::create(c, {}, cpu.get()).value());
  a->init_weights(4);
  ASSERT_TRUE(save_model_folder(*a, dir_.string(), DType::kBF16).is_ok());
  auto b = std::move(load_model(dir_.string(), {}, cpu.get()).value());
  EXPECT_TRUE(b->config().tie_embeddings);
  for (int g = 0; g < a->num_groups(); ++g) {
    auto va = group_values(*a, g), vb = group_values(*b, g);
    for (size_t i = 0; i < va.size(); ++i) ASSERT_EQ(bf16_to_f32(f32_to_bf16(va[i])), vb[i]);
  }
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);  // tie rounds to even
  EXPECT_EQ(f16_to_f32(f32_to_f16(0.1f)), 0.0999755859375f);
}

TEST_F(HfFolder, ShardedFolderWritesAnIndexAndLoads) {
  auto cpu = make_cpu_backend();
  ModelConfig c = *preset_config("tiny");
  auto a = std::move(Model::create(c, {}, cpu.get()).value());
  a->init_weights(5);
  ASSERT_TRUE(save_model_folder(*a, dir_.string(), DType::kF16, 40000).is_ok());
  EXPECT_TRUE(fs::exists(dir_ / "model.safetensors.index.json"));
  int shards = 0;
  for (const auto& e : fs::directory_iterator(dir_))
    shards += e.path().extension() == ".safetensors";
  EXPECT_GT(shards, 1);
  EXPECT_FALSE(fs::exists(dir_ / "model.safetensors"));
  auto ckpt = SafetensorsCheckpoint::open(dir_.string());
  ASSERT_TRUE(ckpt.is_ok());
  EXPECT_TRUE(ckpt->contains("model.layers.1.mlp.down_proj.weight"));
  auto b = load_model(dir_.string(), {}, cpu.get());
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  EXPECT_NEAR((*b)->params(1)[100], a->params(1)[100], 1e-3);
}

TEST_F(HfFolder, TensorParallelRankReadsOnlyItsSlices) {
  auto cpu = make_cpu_backend();
  ModelConfig c = *preset_config("tiny");
  auto full = std::move(Model::create(c, {}, cpu.get()).value());
  full->init_weights(6);
  ASSERT_TRUE(save_model_folder(*full, dir_.string(), DType::kF32).is_ok());
  cohort::testing::expect_loaded_shards_are_fresh_slices(dir_.string(), c, 4, 6, cpu.get());
}

// Tensors above the loader's 1M-element pieces (a 40,000-row embedding and
// LM head) are read in row pieces on several threads: whole and as
// vocabulary shards, every value lands where a single read puts it.
TEST_F(HfFolder, TensorsOfMillionsOfElementsLoadInPiecesExactly) {
  auto cpu = make_cpu_backend();
  ModelConfig c = *preset_config("tiny");
  c.vocab_size = 40000;
  c.tie_embeddings = false;
  ASSERT_GT(int64_t(c.vocab_size) * c.hidden, int64_t{2} << 20);
  auto full = std::move(Model::create(c, {}, cpu.get()).value());
  full->init_weights(8);
  ASSERT_TRUE(save_model_folder(*full, dir_.string(), DType::kF32).is_ok());
  auto whole = load_model(dir_.string(), {}, cpu.get());
  ASSERT_TRUE(whole.is_ok()) << whole.status().to_string();
  for (int g = 0; g < full->num_groups(); ++g) {
    EXPECT_EQ(group_values(*full, g), group_values(**whole, g)) << "group " << g;
  }
  cohort::testing::expect_loaded_shards_are_fresh_slices(dir_.string(), c, 2, 8, cpu.get());
}

TEST_F(HfFolder, ReadsColumnsOfATensor) {
  fs::create_directories(dir_);
  const std::vector<float> m = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};  // 3 x 4
  ASSERT_TRUE(write_safetensors((dir_ / "t.safetensors").string(),
                                {TensorToWrite{"m", {3, 4}, m.data(), DType::kBF16}})
                  .is_ok());
  auto f = SafetensorsFile::open((dir_ / "t.safetensors").string());
  ASSERT_TRUE(f.is_ok());
  std::vector<float> cols(6), rows(4);
  ASSERT_TRUE((*f)->read_cols_f32("m", 1, 3, cols.data()).is_ok());
  EXPECT_EQ(cols, (std::vector<float>{1, 2, 5, 6, 9, 10}));
  ASSERT_TRUE((*f)->read_rows_f32("m", 2, 3, rows.data()).is_ok());
  EXPECT_EQ(rows, (std::vector<float>{8, 9, 10, 11}));
  EXPECT_FALSE((*f)->read_cols_f32("m", 3, 5, cols.data()).is_ok());
  EXPECT_EQ((*f)->read_f32("nope", cols.data()).code(), StatusCode::kNotFound);
}

TEST_F(HfFolder, OtherDtypesAreListedButNotRead) {
  fs::create_directories(dir_);
  // A header with an I64 buffer beside an F32 weight, written by hand.
  const std::string header = R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)"
                             R"("w":{"dtype":"F32","shape":[1],"data_offsets":[16,20]}})";
  std::string bytes(8, '\0');
  const uint64_t len = header.size();
  std::memcpy(bytes.data(), &len, 8);
  bytes += header + std::string(16, '\0');
  const float one = 1.0f;
  bytes.append(reinterpret_cast<const char*>(&one), 4);
  std::ofstream(dir_ / "x.safetensors", std::ios::binary) << bytes;
  auto f = SafetensorsFile::open((dir_ / "x.safetensors").string());
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  float v = 0;
  ASSERT_TRUE((*f)->read_f32("w", &v).is_ok());
  EXPECT_EQ(v, 1.0f);
  auto bad = (*f)->read_f32("ids", &v);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.message().find("I64"), std::string::npos);
}

// Shapes and offsets that are not non-negative integers, or that multiply
// past the data, are errors naming the tensor (a float such as 5.5e27 once
// reached an unchecked integer conversion: the fuzzer's find).
TEST_F(HfFolder, MalformedShapesAndOffsetsAreErrors) {
  fs::create_directories(dir_);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"w":{"dtype":"F32","shape":[5555555555555555555555555553],"data_offsets":[0,4]}})", "shape"},
      {R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "shape"},
      {R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", "shape"},
      {R"({"w":{"dtype":"F32","shape":[65536,65536,65536,65536],"data_offsets":[0,4]}})", "shape"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4e40]}})", "data_offsets"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", "data_offsets"},
      {R"({"w":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", "shape"},
  };
  for (const auto& [header, word] : cases) {
    std::string bytes(8, '\0');
    const uint64_t len = header.size();
    std::memcpy(bytes.data(), &len, 8);
    bytes += header + std::string(4, '\0');
    std::ofstream(dir_ / "bad.safetensors", std::ios::binary | std::ios::trunc) << bytes;
    auto f = SafetensorsFile::open((dir_ / "bad.safetensors").string());
    ASSERT_FALSE(f.is_ok()) << header;
    EXPECT_NE(f.status().message().find("w: "), std::string::npos) << f.status().to_string();
    EXPECT_NE(f.status().message().find(word), std::string::npos) << f.status().to_string();
  }
}

TEST(SafetensorsDtype, ModelDtypesRoundTripThroughTheFilesSpelling) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32}) {
    auto back = parse_dtype(safetensors_dtype_name(d));
    ASSERT_TRUE(back.is_ok()) << safetensors_dtype_name(d);
    EXPECT_EQ(*back, d);
    EXPECT_EQ(*parse_dtype(dtype_name(d)), d);  // cohort's own spelling too
  }
  // The collective-only dtypes have a file spelling but are no model tensor.
  EXPECT_STREQ(safetensors_dtype_name(DType::kI64), "I64");
  EXPECT_STREQ(safetensors_dtype_name(DType::kU8), "U8");
  EXPECT_FALSE(parse_dtype("I64").is_ok());
  EXPECT_FALSE(parse_dtype("U8").is_ok());
}

TEST_F(HfFolder, TruncatedFileIsAnErrorNotACrash) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "model.safetensors") << "\x10\0\0\0\0\0\0\0{\"a\":";
  auto ckpt = SafetensorsCheckpoint::open(dir_.string());
  ASSERT_FALSE(ckpt.is_ok());
  EXPECT_NE(ckpt.status().message().find("model.safetensors"), std::string::npos);
  EXPECT_EQ(SafetensorsCheckpoint::open((dir_ / "missing").string()).status().code(),
            StatusCode::kNotFound);
}

TEST(HfConfig, ParsesQwen3AndLlamaConfigsAsPublished) {
  const std::string qwen3 = R"({"architectures":["Qwen3ForCausalLM"],"attention_bias":false,
    "head_dim":128,"hidden_act":"silu","hidden_size":1024,"intermediate_size":3072,
    "max_position_embeddings":40960,"model_type":"qwen3","num_attention_heads":16,
    "num_hidden_layers":28,"num_key_value_heads":8,"rms_norm_eps":1e-06,"rope_scaling":null,
    "rope_theta":1000000,"tie_word_embeddings":true,"vocab_size":151936})";
  auto q = parse_config_json(qwen3, 4096);
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  const ModelConfig want_q = *preset_config("qwen3-0.6b");
  EXPECT_EQ(q->num_parameters(), want_q.num_parameters());
  EXPECT_EQ(q->num_parameters(), 596049920);  // Qwen3-0.6B's published count (tied)
  EXPECT_TRUE(q->qk_norm);
  EXPECT_EQ(q->max_seq, 4096);
  const std::string llama = R"({"model_type":"llama","hidden_size":2048,"intermediate_size":8192,
    "num_attention_heads":32,"num_hidden_layers":16,"num_key_value_heads":8,"head_dim":64,
    "rms_norm_eps":1e-05,"rope_theta":500000.0,"tie_word_embeddings":true,"vocab_size":128256,
    "max_position_embeddings":131072,"rope_scaling":{"factor":32.0,"high_freq_factor":4.0,
    "low_freq_factor":1.0,"original_max_position_embeddings":8192,"rope_type":"llama3"}})";
  auto l = parse_config_json(llama, 4096);
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  const ModelConfig want_l = *preset_config("llama-3.2-1b");
  EXPECT_EQ(l->num_parameters(), want_l.num_parameters());
  EXPECT_EQ(l->num_parameters(), 1235814400);  // Llama-3.2-1B
  EXPECT_TRUE(l->rope_scaling.enabled);
  EXPECT_FALSE(l->qk_norm);
  // Round trip through our own writer.
  auto again = parse_config_json(config_json_text(*l), 4096);
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->rope_scaling.factor, 32.0f);
  EXPECT_EQ(again->max_position_embeddings, 131072);
  EXPECT_EQ(again->max_seq, 4096);
}

TEST(HfConfig, ReadsTransformers5RopeParameters) {
  // transformers 5 moves rope_theta and the scaling into rope_parameters.
  const std::string llama = R"({"model_type":"llama","hidden_size":64,"intermediate_size":160,
    "num_attention_heads":4,"num_hidden_layers":2,"num_key_value_heads":2,"head_dim":16,
    "rms_norm_eps":1e-05,"tie_word_embeddings":false,"vocab_size":512,"max_position_embeddings":256,
    "rope_parameters":{"rope_type":"llama3","rope_theta":500000.0,"factor":8.0,"low_freq_factor":1.0,
    "high_freq_factor":4.0,"original_max_position_embeddings":64}})";
  auto l = parse_config_json(llama, 4096);
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  EXPECT_EQ(l->rope_theta, 500000.0f);
  EXPECT_TRUE(l->rope_scaling.enabled);
  EXPECT_EQ(l->rope_scaling.factor, 8.0f);
  EXPECT_EQ(l->rope_scaling.original_max_position, 64);
  const std::string qwen3 = R"({"model_type":"qwen3","hidden_size":64,"intermediate_size":160,
    "num_attention_heads":4,"num_hidden_layers":2,"num_key_value_heads":2,"head_dim":32,
    "vocab_size":512,"rope_parameters":{"rope_type":"default","rope_theta":1000000.0}})";
  auto q = parse_config_json(qwen3, 4096);
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  EXPECT_EQ(q->rope_theta, 1000000.0f);
  EXPECT_FALSE(q->rope_scaling.enabled);
}

TEST(HfConfig, RejectsUnsupportedModelsWithTheField) {
  auto bad = parse_config_json(R"({"model_type":"gpt2"})");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("gpt2"), std::string::npos);
  auto missing = parse_config_json(R"({"model_type":"llama","hidden_size":8})");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("vocab_size"), std::string::npos);
}

// Integer fields that are floats, strings or beyond int name the field; no
// heads is a validation error, not a division by zero.
TEST(HfConfig, IntegerFieldsMustBeIntegersInRange) {
  const std::string base = R"("model_type":"llama","intermediate_size":160,"num_hidden_layers":2,)"
                           R"("num_key_value_heads":2,"vocab_size":512)";
  for (const auto& [fields, word] : std::vector<std::pair<std::string, std::string>>{
           {R"("hidden_size":1e30,"num_attention_heads":4)", "hidden_size"},
           {R"("hidden_size":64.5,"num_attention_heads":4)", "hidden_size"},
           {R"("hidden_size":64,"num_attention_heads":"4")", "num_attention_heads"},
           {R"("hidden_size":64,"num_attention_heads":4,"head_dim":4294967312)", "head_dim"},
           {R"("hidden_size":64,"num_attention_heads":4,"max_position_embeddings":-1e300)",
            "max_position_embeddings"},
           {R"("hidden_size":64,"num_attention_heads":0)", "heads"}}) {
    auto c = parse_config_json("{" + base + "," + fields + "}");
    ASSERT_FALSE(c.is_ok()) << fields;
    EXPECT_NE(c.status().message().find(word), std::string::npos) << c.status().to_string();
  }
}

// Sizes a hostile config.json declares are refused before anything is
// allocated, each naming its field.
TEST(HfConfig, SizesBeyondTheLimitsAreRefusedNamingTheField) {
  const std::string base = R"("model_type":"llama","intermediate_size":160,"num_key_value_heads":2,"vocab_size":512)";
  for (const auto& [fields, word] : std::vector<std::pair<std::string, std::string>>{
           {R"("hidden_size":1000000000,"num_attention_heads":4,"num_hidden_layers":2)", "hidden_size"},
           {R"("hidden_size":64,"num_attention_heads":1000,"head_dim":1000,"num_hidden_layers":2)",
            "num_attention_heads * head_dim"},
           {R"("hidden_size":64,"num_attention_heads":4,"num_hidden_layers":1000000)", "num_hidden_layers"},
           {R"("hidden_size":64,"num_attention_heads":4,"num_hidden_layers":2,"head_dim":65536)", "head_dim"},
           {R"("hidden_size":64,"num_attention_heads":4,"num_hidden_layers":2,"vocab_size":2000000000)",
            "vocab_size"},
           {R"("hidden_size":64,"num_attention_heads":4,"num_hidden_layers":2,"intermediate_size":2000000000)",
            "intermediate_size"},
           {R"("hidden_size":65536,"num_attention_heads":64,"num_hidden_layers":1024,"intermediate_size":1048576)",
            "parameters"}}) {
    auto c = parse_config_json("{" + base + "," + fields + "}", 4096);
    ASSERT_FALSE(c.is_ok()) << fields;
    EXPECT_NE(c.status().message().find(word), std::string::npos) << c.status().to_string();
    EXPECT_NE(c.status().message().find("limit"), std::string::npos) << c.status().to_string();
  }
}

}  // namespace
}  // namespace cohort::hf
