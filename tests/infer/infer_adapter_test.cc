// `[model] adapter` as real ranks: an infer job on a base folder with a PEFT
// adapter folder generates, at tp 1 and 2, exactly what an f32 folder of the
// merged weights (W + scale · B A) generates, and differs from the base.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "hf/peft_adapter.h"
#include "hf/weights.h"
#include "models/backend.h"
#include "models/lora.h"
#include "tests/infer/infer_job_fixture.h"

namespace cohort::testing {
namespace {

TEST(InferAdapter, AnAdapterFolderGeneratesWhatItsMergedWeightsGenerateAtTp1And2) {
  auto cpu = models::make_cpu_backend();
  const models::ModelConfig config = *models::preset_config("tiny");
  auto model = std::move(models::Model::create(config, {}, cpu.get()).value());
  model->init_weights(31);
  const std::string base = scratch_dir("adapter_base").string();
  ASSERT_TRUE(hf::save_model_folder(*model, base, models::DType::kF32).is_ok());

  // Adapters on every projection with random A and B (B is zero when fresh).
  models::LoraConfig lora;
  lora.rank = 4, lora.alpha = 8;
  lora.targets.assign(std::begin(models::kAllLoraTargets), std::end(models::kAllLoraTargets));
  lora.base_dtype = models::DType::kF32;
  auto adapters = std::move(models::LoraAdapters::create(*model, lora).value());
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 0.2f);
  std::vector<hf::TensorToWrite> tensors;
  for (int g = 0; g < adapters->num_groups(); ++g) {
    for (const models::ParamSpec& p : adapters->layout().groups[g].params) {
      float* v = adapters->params(g) + p.offset;
      for (size_t i = 0; i < p.numel; ++i) v[i] = dist(rng);
      tensors.push_back({p.name, p.global_shape, v, models::DType::kF32});
    }
  }
  const std::string adapter = scratch_dir("adapter_folder").string();
  ASSERT_TRUE(hf::write_peft_adapter(adapter, lora, base, tensors).is_ok());
  ASSERT_TRUE(models::merge_lora_adapters(*adapters, *model).is_ok());
  const std::string merged = scratch_dir("adapter_merged").string();
  ASSERT_TRUE(hf::save_model_folder(*model, merged, models::DType::kF32).is_ok());

  const InferRun reference = run_infer_job(three_prompt_job("merged", "hf_dir = \"" + merged + "\"", 1));
  const std::string with_adapter = "hf_dir = \"" + base + "\"\nadapter = \"" + adapter + "\"";
  for (int world : {1, 2}) {
    const std::string name = "adapter_tp" + std::to_string(world);
    expect_same_generation(reference, run_infer_job(three_prompt_job(name, with_adapter, world)), name, 1e-4f);
  }
  const InferRun plain = run_infer_job(three_prompt_job("base_only", "hf_dir = \"" + base + "\"", 1));
  ASSERT_EQ(plain.error, "");
  EXPECT_NE(plain.logits.at(0), reference.logits.at(0)) << "the adapter changed nothing";
}

}  // namespace
}  // namespace cohort::testing
