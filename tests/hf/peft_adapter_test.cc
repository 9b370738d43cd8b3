// PEFT adapter folders: written adapters read back to the same tensors (whole,
// and as tensor-parallel slices), under PEFT's tensor names and
// adapter_config.json fields checked literally; configs that describe what
// cohort's adapters are not (DoRA, biases, per-module ranks, patterns) are
// refused naming the field.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include "hf/peft_adapter.h"
#include "hf/weights.h"
#include "models/backend.h"

namespace cohort::hf {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("cohort_peft_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

models::LoraConfig config(bool rslora = false) {
  models::LoraConfig l;
  l.rank = 3, l.alpha = 12, l.dropout = 0.05, l.use_rslora = rslora;
  l.targets = {models::LoraTarget::kQ, models::LoraTarget::kV, models::LoraTarget::kDown};
  return l;
}

struct Adapters {
  std::unique_ptr<models::Backend> backend = models::make_cpu_backend();
  std::unique_ptr<models::Model> model;
  std::unique_ptr<models::LoraAdapters> lora;
  Adapters(const models::LoraConfig& l, models::ShardSpec shard = {}) {
    model = std::move(models::Model::create(*models::preset_config("tiny"), shard, backend.get(),
                                            tiny_tp(shard), models::Model::Buffers::kParamsOnly)
                          .value());
    lora = std::move(models::LoraAdapters::create(*model, l).value());
  }
  // A tp shard is only laid out here, never run: the callbacks are never called.
  static models::TensorParallelComm tiny_tp(models::ShardSpec shard) {
    models::TensorParallelComm tp;
    if (shard.tp_size == 1) return tp;
    tp.all_reduce_sum = tp.all_reduce_max = [](float*, size_t) {};
    tp.all_gather = [](const float*, float*, size_t) {};
    return tp;
  }
};

// Every adapter of an unsharded set, random, as the files would carry it.
std::vector<TensorToWrite> random_tensors(Adapters& a, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<TensorToWrite> out;
  for (int g = 0; g < a.lora->num_groups(); ++g)
    for (const models::ParamSpec& p : a.lora->layout().groups[g].params) {
      float* v = a.lora->params(g) + p.offset;
      for (size_t i = 0; i < p.numel; ++i) v[i] = dist(rng);
      out.push_back({p.name, p.global_shape, v, DType::kF32});
    }
  return out;
}

TEST(PeftAdapter, RoundTripsUnderPeftsNamesAndFields) {
  Adapters written(config(true));
  const auto tensors = random_tensors(written, 1);
  const fs::path dir = scratch("round_trip");
  ASSERT_TRUE(
      write_peft_adapter(dir.string(), written.lora->config(), "Qwen/Qwen3-0.6B", tensors).is_ok());

  auto json = nlohmann::json::parse(std::ifstream(dir / "adapter_config.json"));
  EXPECT_EQ(json["peft_type"], "LORA");
  EXPECT_EQ(json["task_type"], "CAUSAL_LM");
  EXPECT_EQ(json["r"], 3);
  EXPECT_EQ(json["lora_alpha"], 12);
  EXPECT_DOUBLE_EQ(json["lora_dropout"].get<double>(), 0.05);
  EXPECT_EQ(json["target_modules"], nlohmann::json({"q_proj", "v_proj", "down_proj"}));
  EXPECT_EQ(json["use_rslora"], true);
  EXPECT_EQ(json["bias"], "none");
  EXPECT_EQ(json["init_lora_weights"], true);
  EXPECT_EQ(json["use_dora"], false);
  EXPECT_EQ(json["base_model_name_or_path"], "Qwen/Qwen3-0.6B");

  auto file = SafetensorsFile::open((dir / "adapter_model.safetensors").string());
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  EXPECT_EQ((*file)->tensors().size(), 2u * 3 * 2);
  const SafetensorsInfo* a =
      (*file)->find("base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight");
  const SafetensorsInfo* b =
      (*file)->find("base_model.model.model.layers.0.mlp.down_proj.lora_B.weight");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{3, 64}));  // [r, hidden]
  EXPECT_EQ(b->shape, (std::vector<int64_t>{64, 3}));  // [hidden, r]
  EXPECT_EQ(a->dtype_name, "F32");

  Adapters read(config(true));
  ASSERT_TRUE(load_peft_adapter(dir.string(), *read.lora).is_ok());
  for (int g = 0; g < read.lora->num_groups(); ++g) {
    const size_t n = read.lora->layout().groups[g].numel;
    const std::vector<float> got(read.lora->params(g), read.lora->params(g) + n);
    const std::vector<float> want(written.lora->params(g), written.lora->params(g) + n);
    EXPECT_EQ(got, want) << read.lora->layout().groups[g].name;
  }
  auto parsed = read_peft_config(dir.string());
  ASSERT_TRUE(parsed.is_ok());
  EXPECT_EQ(parsed->lora.targets, written.lora->config().targets);
  EXPECT_FLOAT_EQ(parsed->lora.scale(), written.lora->config().scale());
}

// [model] adapter: a folder's adapters merged into a model's weights equal
// the same adapters merged from memory, and a folder whose shapes do not fit
// the model is refused naming it.
TEST(PeftAdapter, AFoldersAdaptersMergeIntoTheWeightsAsTheyDoFromMemory) {
  Adapters written(config());
  const auto tensors = random_tensors(written, 3);
  const fs::path dir = scratch("merge");
  ASSERT_TRUE(write_peft_adapter(dir.string(), written.lora->config(), "tiny", tensors).is_ok());
  auto backend = models::make_cpu_backend();
  auto make = [&] {
    auto m = std::move(models::Model::create(*models::preset_config("tiny"), {}, backend.get(), {},
                                             models::Model::Buffers::kParamsOnly)
                           .value());
    m->init_weights(5, 0.2f);
    return m;
  };
  auto from_folder = make(), from_memory = make(), base = make();
  ASSERT_TRUE(merge_peft_adapter(dir.string(), *from_folder).is_ok());
  ASSERT_TRUE(models::merge_lora_adapters(*written.lora, *from_memory).is_ok());
  int changed = 0;
  for (int g = 0; g < static_cast<int>(from_folder->layout().groups.size()); ++g) {
    const size_t n = from_folder->layout().groups[g].numel;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(from_folder->params(g)[i], from_memory->params(g)[i]) << g << " " << i;
      changed += from_folder->params(g)[i] != base->params(g)[i];
    }
  }
  EXPECT_GT(changed, 0);

  models::ModelConfig other = *models::preset_config("tiny");
  other.hidden *= 2;
  other.head_dim *= 2;
  auto wider = std::move(models::Model::create(other, {}, backend.get(), {}, models::Model::Buffers::kParamsOnly).value());
  const Status refused = merge_peft_adapter(dir.string(), *wider);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.message().find(dir.string()), std::string::npos) << refused.message();
}

// Each tensor-parallel shard reads its slices: B's rows under q and v, A's
// columns under down.
TEST(PeftAdapter, ShardsReadTheirSlices) {
  Adapters whole(config());
  const auto tensors = random_tensors(whole, 2);
  const fs::path dir = scratch("slices");
  ASSERT_TRUE(write_peft_adapter(dir.string(), whole.lora->config(), "", tensors).is_ok());
  for (int rank = 0; rank < 2; ++rank) {
    Adapters shard(config(), {rank, 2});
    ASSERT_TRUE(load_peft_adapter(dir.string(), *shard.lora).is_ok());
    for (int g = 0; g < shard.lora->num_groups(); ++g)
      for (const models::ParamSpec& p : shard.lora->layout().groups[g].params) {
        const models::ParamSpec* full = whole.lora->layout().groups[g].find(p.name);
        for (size_t i = 0; i < p.numel; ++i) {
          size_t r = i / p.shape[1], c = i % p.shape[1];
          if (p.shard_dim == models::ShardDim::kRows) r += p.shard_begin;
          if (p.shard_dim == models::ShardDim::kCols) c += p.shard_begin;
          ASSERT_EQ(shard.lora->params(g)[p.offset + i],
                    whole.lora->params(g)[full->offset + r * full->shape[1] + c])
              << p.name << " rank " << rank;
        }
      }
  }
}

TEST(PeftAdapter, AFolderOfOtherAdaptersIsRefusedNamingTheDifference) {
  Adapters written(config());
  const fs::path dir = scratch("other");
  ASSERT_TRUE(
      write_peft_adapter(dir.string(), written.lora->config(), "", random_tensors(written, 3))
          .is_ok());
  models::LoraConfig wider = config();
  wider.rank = 5;
  Adapters read(wider);
  Status s = load_peft_adapter(dir.string(), *read.lora);
  EXPECT_NE(s.message().find("r 3 on"), std::string::npos) << s.to_string();
  fs::remove(dir / "adapter_model.safetensors");
  Adapters same(config());
  EXPECT_FALSE(load_peft_adapter(dir.string(), *same.lora).is_ok());
}

TEST(PeftConfig, WhatCohortsAdaptersAreNotIsRefusedByField) {
  const std::string base =
      R"("peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"])";
  auto refused = [&](const std::string& extra, const std::string& field) {
    auto r = parse_peft_config("{" + base + ", " + extra + "}", "adapter_config.json");
    ASSERT_FALSE(r.is_ok()) << extra;
    EXPECT_EQ(r.status().message().rfind("adapter_config.json: " + field + ":", 0), 0u)
        << r.status().message();
  };
  refused(R"("use_dora": true)", "use_dora");
  refused(R"("bias": "lora_only")", "bias");
  refused(R"("rank_pattern": {"q_proj": 4})", "rank_pattern");
  refused(R"("layers_to_transform": [0, 1])", "layers_to_transform");
  refused(R"("modules_to_save": ["lm_head"])", "modules_to_save");
  auto pattern =
      parse_peft_config(R"({"peft_type": "LORA", "r": 8, "target_modules": ".*q_proj"})", "a.json");
  EXPECT_NE(pattern.status().message().find("target_modules: \".*q_proj\": a pattern"),
            std::string::npos);
  auto ia3 = parse_peft_config(R"({"peft_type": "IA3", "r": 8})", "a.json");
  EXPECT_NE(ia3.status().message().find("peft_type: \"IA3\""), std::string::npos);
  auto lm_head = parse_peft_config(
      R"({"peft_type": "LORA", "r": 8, "target_modules": ["lm_head"]})", "a.json");
  EXPECT_NE(lm_head.status().message().find("unknown target module \"lm_head\""),
            std::string::npos);
  auto huge = parse_peft_config(
      R"({"peft_type": "LORA", "r": 100000000, "target_modules": ["q_proj"]})", "a.json");
  EXPECT_FALSE(huge.is_ok()) << "a rank nothing could allocate";
  // A rank beyond int as a float (once undefined behaviour in the conversion) or a fraction.
  for (const char* rank : {"5555555555555555555555555555555555555555555555", "8.5", "\"8\""}) {
    auto bad = parse_peft_config(std::string(R"({"peft_type": "LORA", "r": )") + rank +
                                     R"(, "target_modules": ["q_proj"]})",
                                 "a.json");
    ASSERT_FALSE(bad.is_ok()) << rank;
    EXPECT_EQ(bad.status().message().rfind("a.json: r: ", 0), 0u) << bad.status().message();
  }
  // PEFT's own spellings of what cohort does read: all-linear, gaussian init, no defaults written.
  auto all = parse_peft_config(R"({"peft_type": "LORA", "r": 4, "target_modules": "all-linear",
                                   "init_lora_weights": "gaussian", "rank_pattern": {}, "alpha_pattern": {},
                                   "layers_to_transform": null})",
                               "a.json");
  ASSERT_TRUE(all.is_ok()) << all.status().to_string();
  EXPECT_EQ(all->lora.targets.size(), 7u);
  EXPECT_EQ(all->lora.init, models::LoraInit::kGaussian);
  EXPECT_FLOAT_EQ(all->lora.scale(), 2.0f);  // PEFT's default lora_alpha 8
}

}  // namespace
}  // namespace cohort::hf

namespace cohort::hf {
namespace {

// bench/make_peft_adapters.py (the served-adapter benchmark's folders)
// writes what cohort reads: every projection of every layer, the rank and
// alpha it was given, values of magnitude in [2^-7, 2^-6).
TEST(PeftAdapter, TheBenchmarksRandomAdaptersLoad) {
  auto cpu = models::make_cpu_backend();
  auto model = std::move(models::Model::create(*models::preset_config("tiny"), {}, cpu.get()).value());
  model->init_weights(3);
  const fs::path base = scratch("bench_base"), out = scratch("bench_adapters");
  ASSERT_TRUE(save_model_folder(*model, base.string(), models::DType::kF32).is_ok());
  const std::string command = "python3 " COHORT_SOURCE_DIR "/bench/make_peft_adapters.py " + base.string() + " " +
                              out.string() + " --count 2 --rank 4 --alpha 8 > /dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  for (const char* name : {"a0", "a1"}) {
    auto adapters = read_peft_adapter_for((out / name).string(), *model);
    ASSERT_TRUE(adapters.is_ok()) << adapters.status().to_string();
    const models::LoraAdapters& a = **adapters;
    EXPECT_EQ(a.config().rank, 4);
    EXPECT_FLOAT_EQ(a.config().scale(), 2.0f);
    EXPECT_EQ(a.config().targets.size(), 7u);
    size_t values = 0;
    for (int g = 0; g < a.num_groups(); ++g) {
      for (const models::ParamSpec& p : a.layout().groups[g].params) {
        for (size_t i = 0; i < p.numel; ++i) {
          const float v = std::fabs(a.params(g)[p.offset + i]);
          ASSERT_TRUE(v >= 0x1p-7f && v < 0x1p-6f) << p.name << "[" << i << "] = " << v;
        }
        values += p.numel;
      }
    }
    EXPECT_GT(values, 0u);
  }
}

}  // namespace
}  // namespace cohort::hf
