// `[model] adapter` as real ranks: an infer job on a base folder with a PEFT
// adapter folder generates, at tp 1 and 2, exactly what an f32 folder of the
// merged weights (W + scale · B A) generates, and differs from the base.
#include <gtest/gtest.h>

#include <cmath>

#include "hf/weights.h"
#include "models/backend.h"
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
  const std::string adapter = scratch_dir("adapter_folder").string();
  write_random_adapter(*model, base, 5, 0.2f, adapter);
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
