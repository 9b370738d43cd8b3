// Inference jobs on quantized weights, as real ranks: a GPTQ folder (act-order,
// packed by the tests' own packer) generates at tp 1 and 2 exactly what an
// f32 folder of its dequantized weights generates, and `[model] quantize`
// on a preset matches an f32 folder of the round-tripped weights; the
// summary says which format each weight uses and the KV cache's, and an fp8
// KV cache where the CPU engine runs is refused.
#include <gtest/gtest.h>

#include "hf/load_quantization.h"
#include "hf/weights.h"
#include "models/backend.h"
#include "tests/hf/quantized_folder.h"
#include "tests/infer/infer_job_fixture.h"

namespace cohort::testing {
namespace {

TEST(InferQuantized, GptqFolderGeneratesWhatItsDequantizedWeightsGenerateAtTp1And2) {
  auto cpu = models::make_cpu_backend();
  auto model =
      std::move(models::Model::create(*models::preset_config("tiny"), {}, cpu.get()).value());
  model->init_weights(31);
  const std::string quantized = scratch_dir("gptq_folder").string();
  hf::testing::write_quantized_folder(
      quantized, *model,
      {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 32}, {"desc_act", true}},
      hf::testing::gptq_store(32, true));
  const std::string plain = scratch_dir("gptq_dequantized").string();
  ASSERT_TRUE(hf::save_model_folder(*model, plain, models::DType::kF32).is_ok());

  const InferRun reference =
      run_infer_job(three_prompt_job("gptq_reference", "hf_dir = \"" + plain + "\"", 1));
  const InferRun tp1 = run_infer_job(three_prompt_job("gptq_tp1", "hf_dir = \"" + quantized + "\"", 1));
  expect_same_generation(reference, tp1, "gptq tp 1");
  expect_same_generation(reference,
                   run_infer_job(three_prompt_job("gptq_tp2", "hf_dir = \"" + quantized + "\"", 2)),
                   "gptq tp 2");
  EXPECT_EQ(tp1.summary.at("weights"),
            nlohmann::json({{"gptq int4 g32 act-order", 14}, {"f32", 11}}));
  EXPECT_EQ(tp1.summary.at("quantize"), "none");
  EXPECT_EQ(tp1.summary.at("kv_cache_dtype"), "bf16");
}

// The fp8 KV cache is the CUDA-graph engine's: a job that asks for it on the
// CPU engine stops, naming the key and the engine, rather than running with
// a cache four times the size it planned for.
TEST(InferQuantized, AnFp8KvCacheWhereTheCpuEngineRunsStopsNamingTheKeyAndTheEngine) {
  InferJob job = three_prompt_job("fp8_kv_on_cpu", "preset = \"tiny\"", 1);
  job.infer_lines = "kv_cache_dtype = \"fp8\"";
  const InferRun run = run_infer_job(job);
  EXPECT_NE(run.error.find("infer.kv_cache_dtype = \"fp8\" needs the bf16 CUDA-graph engine, but this rank runs "
                           "the CPU engine"),
            std::string::npos)
      << run.error;
}

TEST(InferQuantized, QuantizeOptionRunsTheRoundTrippedWeights) {
  // The infer job initialises the preset from infer.seed (1234).
  auto cpu = models::make_cpu_backend();
  auto model =
      std::move(models::Model::create(*models::preset_config("tiny"), {}, cpu.get()).value());
  model->init_weights(1234);
  ASSERT_TRUE(hf::apply_quantize_option(*model, "int4", "").is_ok());
  const std::string plain = scratch_dir("int4_round_trip").string();
  ASSERT_TRUE(hf::save_model_folder(*model, plain, models::DType::kF32).is_ok());

  const InferRun reference =
      run_infer_job(three_prompt_job("int4_reference", "hf_dir = \"" + plain + "\"", 1));
  const InferRun quantized =
      run_infer_job(three_prompt_job("int4_option", "preset = \"tiny\"\nquantize = \"int4\"", 1));
  expect_same_generation(reference, quantized, "quantize = int4");
  EXPECT_EQ(quantized.summary.at("weights"), nlohmann::json({{"int4 g128", 14}, {"f32", 11}}));
  EXPECT_EQ(quantized.summary.at("quantize"), "int4");
  const InferRun unquantized = run_infer_job(three_prompt_job("int4_off", "preset = \"tiny\"", 1));
  ASSERT_EQ(unquantized.error, "");
  EXPECT_NE(unquantized.logits.at(0), quantized.logits.at(0)) << "quantize changed nothing";
}

}  // namespace
}  // namespace cohort::testing
