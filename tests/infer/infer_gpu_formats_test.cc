// The graph engine's model forms on a GPU (label gpu), each against its
// reference: quantized projections against the round-tripped bf16 model,
// the fp8 KV cache against the bf16 cache, a pre-quantized GPTQ folder
// against its dequantized weights, a mixture of experts and served LoRA
// adapters against the CPU engine. Skips, saying why, without a GPU.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "models/decode/cuda_graph_engine.h"
#include "infer/scheduler.h"
#include "models/backend.h"
#include "models/cuda_backend.h"
#include "hf/load_quantization.h"
#include "hf/packed_projections.h"
#include "hf/weights.h"
#include "hf/config_json.h"
#include "models/lora.h"
#include "models/model.h"
#include "tests/hf/quantized_folder.h"
#include "tests/infer/infer_job_fixture.h"
#include "tests/models/grad_check.h"

#include "tests/infer/gpu_engine_checks.h"

namespace cohort::testing {
namespace {

// `[model] quantize` on the graph engine: projections held quantized in the
// row layout (the quantized GEMV up to 8 rows; beyond, the tensor-core
// skinny GEMM over the codes or the codes expanded to bf16) give the greedy
// tokens of the bf16 engine serving the same model round-tripped through
// the format on the host; where the two part ways, the bf16 run's logits
// must show a near tie (it rounds the round-tripped values to bf16, the
// quantized engine keeps them exact). e4m3 weights in 128 x 128 blocks run
// twice: with COHORT_FP8_GEMM=0 as above, then on the FP8 tensor cores
// beyond 8 rows, whose activations are rounded to e4m3 too (3 mantissa
// bits, about 2.4% a value, rms): that run's ties may be 6% of the step's
// largest |logit| (an H100 measured gaps up to 4.4%; a wrong scale or
// layout gives logits of another model). The FP8 GEMM itself is checked
// exactly against its CPU reference in models_fp8_gemm_gpu_test.
TEST(InferGpu, QuantizedProjectionsGiveTheTokensOfTheRoundTrippedModel) {
  COHORT_SKIP_WITHOUT_GRAPH_ENGINE();
  const std::string dir = gpu_model_dir(64);
  auto config = hf::load_config_json(dir + "/config.json");
  ASSERT_TRUE(config.is_ok()) << config.status().message();
  using models::quant::WeightFormat;
  struct Case {
    WeightFormat format;
    bool fp8_tensor_cores;
  };
  for (const Case c : {Case{WeightFormat::kInt4, false}, Case{WeightFormat::kInt8, false},
                       Case{WeightFormat::kFp8Block, false}, Case{WeightFormat::kFp8Block, true}}) {
    const std::string name = std::string(models::quant::to_string(c.format)) + (c.fp8_tensor_cores ? " (W8A8)" : "");
    SCOPED_TRACE(name);
    if (c.fp8_tensor_cores) {
      ::unsetenv("COHORT_FP8_GEMM");
    } else {
      ::setenv("COHORT_FP8_GEMM", "0", 1);
    }
    TokenRuns tokens[2];
    std::map<int64_t, std::vector<std::vector<float>>> bf16_logits;
    bool unsupported = false;
    for (int quantized = 0; quantized < 2 && !unsupported; ++quantized) {
      models::decode::CudaEngineOptions options;
      options.slots = 3;
      options.capacity = 128;
      if (quantized) options.projection_format = c.format;
      auto engine = models::decode::make_cuda_graph_engine(*config, options, nullptr, [&](models::Model& m) {
        COHORT_RETURN_IF_ERROR(hf::load_weights(m, dir));
        return quantized ? Status::ok() : hf::quantize_round_trip(m, c.format);
      });
      ASSERT_TRUE(engine.is_ok()) << engine.status().message();
      if (quantized) {
        const std::string line = (*engine)->describe();
        EXPECT_NE(line.find(models::quant::to_string(c.format)), std::string::npos) << line;
        const bool w8a8 = line.find("FP8 tensor cores") != std::string::npos;
        if (!c.fp8_tensor_cores) {
          EXPECT_FALSE(w8a8) << line;
        }
        if (c.fp8_tensor_cores && !w8a8) {
          std::printf("%s: this GPU has no block-scaled FP8 GEMM (%s); not run\n", name.c_str(), line.c_str());
          unsupported = true;
          break;
        }
      }
      tokens[quantized] = five_greedy_requests(**engine, quantized ? nullptr : &bf16_logits);
    }
    if (unsupported) continue;
    const int parted =
        parted_at_near_ties(tokens[0], tokens[1], bf16_logits, 12, 0.15f, c.fp8_tensor_cores ? 0.06f : 0.0f);
    std::printf("%s projections vs bf16 of the round-tripped model: %d of 5 requests parted at a near tie\n",
                name.c_str(), parted);
  }
  ::unsetenv("COHORT_FP8_GEMM");
}

// The fp8 KV cache (models/ops/kv_fp8.h) on the graph engine, with the
// prefill tiles (head_dim 64) and the decode kernel for prompts (32): the
// same memory plans twice the blocks of bf16's; replayed graphs give the
// eager run's tokens; and the logits follow the bf16 cache's: at every step
// both runs reach with the same tokens (up to each request's first parting),
// within 15% (norm-relative) of them (an H200 measured 9.5% at head_dim 64
// and 10.0% at 32). e4m3 keeps 3 mantissa bits of each K
// and V value (bf16 7), about 4% RMS of each, so a greedy choice may part
// at a gap of a few tenths of this model's peaked logits; what is held is
// the logits' distance, which a wrong code, scale or read would break.
TEST(InferGpu, AnFp8KvCacheHoldsTwiceThePositionsAndFollowsTheBf16CachesTokens) {
  COHORT_SKIP_WITHOUT_GRAPH_ENGINE();
  for (int head_dim : {64, 32}) {
    SCOPED_TRACE("head_dim " + std::to_string(head_dim));
    const std::string dir = gpu_model_dir(head_dim);
    auto config = hf::load_config_json(dir + "/config.json");
    ASSERT_TRUE(config.is_ok()) << config.status().message();
    models::decode::CudaEngineOptions options;
    options.slots = 3;
    options.capacity = 128;
    auto bf16_plan = models::decode::plan_kv_memory(*config, options, 0.9);
    options.kv_dtype = models::KvDtype::kFp8;
    auto fp8_plan = models::decode::plan_kv_memory(*config, options, 0.9);
    ASSERT_TRUE(bf16_plan.is_ok() && fp8_plan.is_ok());
    EXPECT_EQ(fp8_plan->block_bytes * 2, bf16_plan->block_bytes);
    EXPECT_GE(fp8_plan->blocks, 2 * bf16_plan->blocks);
    auto load = [&](models::Model& m) { return hf::load_weights(m, dir); };
    std::map<int64_t, std::vector<std::vector<float>>> bf16_logits, fp8_logits;
    TokenRuns bf16_tokens, fp8_tokens[2];
    {
      options.kv_dtype = models::KvDtype::kBf16;
      auto engine = models::decode::make_cuda_graph_engine(*config, options, nullptr, load);
      ASSERT_TRUE(engine.is_ok()) << engine.status().message();
      bf16_tokens = five_greedy_requests(**engine, &bf16_logits);
    }
    options.kv_dtype = models::KvDtype::kFp8;
    options.overrides.projections = "cublaslt";  // the same sums with and without graphs
    for (int graphs = 0; graphs < 2; ++graphs) {
      options.cuda_graphs = graphs == 1;
      auto engine = models::decode::make_cuda_graph_engine(*config, options, nullptr, load);
      ASSERT_TRUE(engine.is_ok()) << engine.status().message();
      EXPECT_NE((*engine)->describe().find("fp8 (e4m3"), std::string::npos) << (*engine)->describe();
      fp8_tokens[graphs] = five_greedy_requests(**engine, graphs == 1 ? &fp8_logits : nullptr);
    }
    EXPECT_EQ(fp8_tokens[0], fp8_tokens[1]) << "graph replay vs eager";
    int parted = 0;
    double worst = 0;
    for (const auto& [id, want] : bf16_tokens) {
      const std::vector<int32_t>& got = fp8_tokens[1].at(id);
      ASSERT_EQ(got.size(), want.size()) << id;
      size_t same = 0;
      while (same < want.size() && want[same] == got[same]) ++same;
      parted += same < want.size();
      // Steps 0 .. same read the same prefix in both runs.
      for (size_t k = 0; k <= same && k < want.size(); ++k) {
        worst = std::max(worst, models::testing::norm_relative(bf16_logits.at(id).at(k), fp8_logits.at(id).at(k)));
      }
    }
    EXPECT_LT(worst, 0.15) << "fp8 cache logits against the bf16 cache's";
    std::printf("head_dim %d, fp8 KV cache vs bf16: logits within %.4f (norm-relative), %d of 5 requests parted; "
                "%lld blocks against %lld\n",
                head_dim, worst, parted, static_cast<long long>(fp8_plan->blocks),
                static_cast<long long>(bf16_plan->blocks));
  }
}

// A pre-quantized folder (GPTQ int4, group 32) on the graph engine: its
// projections uploaded as the checkpoint packs them (hf/packed_projections.h)
// give the greedy tokens of the bf16 engine serving the loader's dequantized
// values; where the two part ways the bf16 run's logits show a near tie.
TEST(InferGpu, APreQuantizedFolderServedPackedGivesTheTokensOfItsDequantizedWeights) {
  COHORT_SKIP_WITHOUT_GRAPH_ENGINE();
  auto cpu = models::make_cpu_backend();
  models::ModelConfig c;
  c.model_type = "qwen3";
  c.vocab_size = 1024, c.hidden = 256, c.layers = 3, c.heads = 8, c.kv_heads = 4;
  c.head_dim = 64, c.intermediate = 512, c.max_seq = 256;
  auto reference = std::move(models::Model::create(c, {}, cpu.get()).value());
  reference->init_weights(21, 0.2f);
  const std::string dir = scratch_dir("gpu_gptq").string();
  const nlohmann::json gptq = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 32}, {"desc_act", false},
                               {"sym", false}, {"checkpoint_format", "gptq"}};
  hf::testing::write_quantized_folder(dir, *reference, gptq, hf::testing::gptq_store(32, false));
  auto config = hf::load_config_json(dir + "/config.json");
  ASSERT_TRUE(config.is_ok()) << config.status().message();
  TokenRuns tokens[2];
  std::map<int64_t, std::vector<std::vector<float>>> bf16_logits;
  for (int packed = 0; packed < 2; ++packed) {
    models::decode::CudaEngineOptions options;
    options.slots = 3;
    options.capacity = 128;
    std::shared_ptr<hf::PackedProjections> store;
    if (packed) {
      store = std::move(hf::PackedProjections::open(dir).value());
      ASSERT_NE(store, nullptr);
      options.packed_projection = [store](const models::ParamSpec& p) { return store->read(p); };
    }
    auto engine = graph_engine_over(dir, *config, options);
    ASSERT_TRUE(engine.is_ok()) << engine.status().message();
    if (packed) {
      EXPECT_NE((*engine)->describe().find("gptq int4"), std::string::npos) << (*engine)->describe();
    }
    tokens[packed] = five_greedy_requests(**engine, packed ? nullptr : &bf16_logits);
  }
  const int parted = parted_at_near_ties(tokens[0], tokens[1], bf16_logits, 12);
  std::printf("gptq int4 packed vs bf16 of its dequantized weights: %d of 5 requests parted at a near tie\n", parted);
}

// Five greedy requests (adapters: each request's, in turn) on the CPU
// engine and on the graph engine, eagerly and replayed from graphs, over
// the weights `load` gives and the adapters `add_adapters` adds to each
// engine: replay gives the eager run's tokens, and the graph engine's part
// from the CPU engine's only where the CPU's logits show a near tie.
// lora_run_rows, lora_dense, lora_dense_decode, lora_side_stream:
// CudaEngineOptions::Overrides' (-1 and unset: the engine's defaults).
void expect_graph_engine_follows_cpu(const models::ModelConfig& config, const models::decode::EngineWeightLoader& load,
                                     bool lora, const std::function<void(models::decode::InferenceEngine&)>& add_adapters,
                                     const std::vector<int>& adapters, const std::string& what,
                                     int lora_run_rows = -1, std::optional<bool> lora_dense = std::nullopt,
                                     std::optional<bool> lora_dense_decode = std::nullopt,
                                     std::optional<bool> lora_side_stream = std::nullopt) {
  std::map<int64_t, std::vector<std::vector<float>>> cpu_logits;
  TokenRuns cpu_tokens;
  {
    auto backend = models::make_cpu_backend();
    auto model = models::Model::create(config, {}, backend.get());
    ASSERT_TRUE(model.is_ok()) << model.status().message();
    ASSERT_TRUE(load(**model).is_ok());
    auto engine = models::decode::ModelEngine::create(std::move(backend), std::move(*model), 3, 128);
    ASSERT_TRUE(engine.is_ok()) << engine.status().message();
    if (add_adapters) add_adapters(**engine);
    cpu_tokens = five_greedy_requests(**engine, &cpu_logits, adapters);
  }
  TokenRuns graph_tokens[2];
  for (int graphs = 0; graphs < 2; ++graphs) {
    models::decode::CudaEngineOptions options;
    options.slots = 3;
    options.capacity = 128;
    options.lora = lora;
    options.overrides.lora_run_rows = lora_run_rows;
    options.overrides.lora_dense = lora_dense;
    options.overrides.lora_dense_decode = lora_dense_decode;
    options.overrides.lora_side_stream = lora_side_stream;
    options.cuda_graphs = graphs == 1;
    options.overrides.projections = "cublaslt";  // the same sums with and without graphs
    auto engine = models::decode::make_cuda_graph_engine(config, options, nullptr, load);
    ASSERT_TRUE(engine.is_ok()) << engine.status().message();
    if (add_adapters) add_adapters(**engine);
    graph_tokens[graphs] = five_greedy_requests(**engine, nullptr, adapters);
  }
  EXPECT_EQ(graph_tokens[0], graph_tokens[1]) << what << ": graph replay vs eager";
  const int parted = parted_at_near_ties(cpu_tokens, graph_tokens[1], cpu_logits, 12);
  std::printf("%s, bf16 graph engine vs CPU: %d of 5 requests parted at a near tie\n", what.c_str(), parted);
}

// A mixture of experts on the graph engine (its sparse layers: router,
// softmax and top k, the experts over their sorted rows, models/ops/
// moe_experts.h): replayed decode graphs give the eager run's tokens, and
// the tokens agree with the CPU reference engine's up to near ties of its
// logits. A dense first layer, then 8 experts of 64, top 2.
TEST(InferGpu, AMixtureOfExpertsOnTheGraphEngineGivesTheCpuReferencesTokens) {
  COHORT_SKIP_WITHOUT_GRAPH_ENGINE();
  models::ModelConfig c;
  c.model_type = "qwen3_moe";
  c.vocab_size = 1024, c.hidden = 256, c.layers = 3, c.heads = 8, c.kv_heads = 4;
  c.head_dim = 64, c.intermediate = 512, c.max_seq = 256;
  c.moe.experts = 8, c.moe.experts_per_token = 2, c.moe.expert_intermediate = 64;
  c.moe.normalize_top_k = true, c.moe.dense_layers = {0};
  expect_graph_engine_follows_cpu(c, [](models::Model& m) {
    m.init_weights(21, 0.2f);
    return Status::ok();
  }, false, nullptr, {}, "mixture of experts");
}

// Random LoRA adapters (rank 8, every projection) for `base`'s shard,
// the same values for the same seed whatever engine holds them.
std::unique_ptr<models::LoraAdapters> random_adapters(models::Model& base, uint32_t seed) {
  models::LoraConfig lora;
  lora.rank = 8, lora.alpha = 16;
  lora.targets.assign(std::begin(models::kAllLoraTargets), std::end(models::kAllLoraTargets));
  auto adapters = std::move(models::LoraAdapters::create(base, lora).value());
  fill_random_adapters(*adapters, seed, 0.05f);
  return adapters;
}

// Which decode steps take served adapters' dense form: on a model of
// hidden 4,096 or more every step with the shrink beside its projection
// and from 16 rows on one stream, none on narrower models, and every step
// or none when forced (COHORT_INFER_LORA_DECODE). Needs no GPU.
TEST(ServedAdapters, DecodeStepsTakeTheDenseFormOnWideModelsUnlessForced) {
#ifndef COHORT_HAVE_CUDA
  GTEST_SKIP() << "built without CUDA: no bf16 graph engine";
#else
  using models::decode::lora_dense_decode_rows;
  EXPECT_EQ(lora_dense_decode_rows(std::nullopt, 4096), 1);
  EXPECT_EQ(lora_dense_decode_rows(std::nullopt, 8192, /*side_stream=*/true), 1);
  EXPECT_EQ(lora_dense_decode_rows(std::nullopt, 4096, /*side_stream=*/false), 16);
  EXPECT_EQ(lora_dense_decode_rows(std::nullopt, 1024), INT_MAX);
  EXPECT_EQ(lora_dense_decode_rows(std::nullopt, 1024, false), INT_MAX);
  EXPECT_EQ(lora_dense_decode_rows(true, 1024), 1);
  EXPECT_EQ(lora_dense_decode_rows(false, 4096), INT_MAX);
#endif
}

// Served adapters on the graph engine (CudaEngineOptions::lora): requests
// for two adapters and for the base share every step, each row adding its
// own adapter's deltas (models/ops/lora_rows.h); replayed graphs give the
// eager run's tokens and the tokens agree with the CPU engine's serving the
// same adapters, up to near ties of its logits.
TEST(InferGpu, ServedAdaptersOnTheGraphEngineGiveTheCpuEnginesTokens) {
  COHORT_SKIP_WITHOUT_GRAPH_ENGINE();
  const std::string dir = gpu_model_dir(64);
  auto config = hf::load_config_json(dir + "/config.json");
  ASSERT_TRUE(config.is_ok()) << config.status().message();
  auto add_two = [](models::decode::InferenceEngine& engine) {
    ASSERT_NE(engine.adapter_base(), nullptr);
    for (uint32_t seed : {5u, 6u}) ASSERT_GE(engine.add_adapter(random_adapters(*engine.adapter_base(), seed)), 0);
  };
  // Prompts of 3 to 47 tokens: by default every prompt step takes the
  // dense form (two rank-8 adapters: 16 columns), and decode steps too where
  // asked (their graphs captured after the adapters came); through the kernels, with
  // runs from 8 rows the four longer prompts' rows take the run kernels and
  // the 3-token prompt's the per-row kernel, in the same steps; with none
  // every row takes the per-row one. The dense form's shrinks run beside
  // their projections on a stream of their own, or after them on one.
  auto load = [&](models::Model& m) { return hf::load_weights(m, dir); };
  expect_graph_engine_follows_cpu(*config, load, true, add_two, {0, 1, -1, 1, 0},
                                  "served adapters, prompts in the dense form");
  expect_graph_engine_follows_cpu(*config, load, true, add_two, {0, 1, -1, 1, 0},
                                  "served adapters, prompts and decode steps in the dense form", -1, std::nullopt,
                                  true);
  expect_graph_engine_follows_cpu(*config, load, true, add_two, {0, 1, -1, 1, 0},
                                  "served adapters, the dense form on one stream", -1, std::nullopt, true, false);
  expect_graph_engine_follows_cpu(*config, load, true, add_two, {0, 1, -1, 1, 0},
                                  "served adapters, prompt runs of 8 rows or more", 8, false);
  expect_graph_engine_follows_cpu(*config, load, true, add_two, {0, 1, -1, 1, 0}, "served adapters, no runs", 0,
                                  false);
}


}  // namespace
}  // namespace cohort::testing
