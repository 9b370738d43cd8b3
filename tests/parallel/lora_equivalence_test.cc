// LoRA under every strategy, with real processes over Gloo: the adapters
// trained on N ranks follow the 1-rank run (per-step losses and final
// adapters), for DDP, ZeRO-1/2/3 and FSDP2 with and without accumulation,
// tensor parallelism (A or B cut as their projection) and dp × tp, and under
// activation checkpointing; the frozen base leaves every rank exactly as it
// was initialised; and the strategies hold gradients and optimizer moments
// for the adapters only.
#include <cmath>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "models/lora.h"
#include "tests/parallel/worker_run.h"

namespace cohort::parallel {
namespace {

using testing::Env;
using testing::expect_same_training;
using testing::WorkerRun;

constexpr int kSteps = 10;
constexpr int kGlobalBatch = 8;
const Env kLora = {{"COHORT_TEST_LORA", "4"}};

WorkerRun run(const std::string& tag, const std::string& strategy, int world, int tp, int micro,
              Env env = kLora) {
  return testing::run_worker("lora_" + tag, strategy, world, tp, kGlobalBatch, micro, kSteps, env);
}

const WorkerRun& reference() {
  static WorkerRun r = run("reference", "ddp", 1, 1, kGlobalBatch);
  return r;
}

struct Case {
  std::string strategy;
  int world, tp, micro;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return c.strategy + "_world" + std::to_string(c.world) + "_tp" + std::to_string(c.tp) +
         (c.micro * c.world / c.tp < kGlobalBatch ? "_accumulating" : "");
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << case_name({c, 0});
}

class LoraEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(LoraEquivalence, AdaptersFollowTheOneRankRun) {
  const Case& c = GetParam();
  const WorkerRun got = run(case_name({c, 0}), c.strategy, c.world, c.tp, c.micro);
  ASSERT_FALSE(reference().params.empty());
  for (const auto& [name, values] : reference().params)
    EXPECT_NE(name.find("lora_"), std::string::npos) << name << ": only adapters are trained";
  expect_same_training(reference(), got, 1e-5, 1e-5, case_name({c, 0}));
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (std::string s : {"ddp", "zero1", "zero2", "zero3", "fsdp2"}) {
    out.push_back({s, 2, 1, kGlobalBatch / 2});  // one micro-step
    out.push_back({s, 2, 1, kGlobalBatch / 4});  // two micro-steps
  }
  out.push_back({"ddp", 2, 2, kGlobalBatch});        // tp = 2: A or B cut as the projection
  out.push_back({"fsdp2", 4, 2, kGlobalBatch / 2});  // dp 2 × tp 2
  out.push_back({"zero1", 4, 4, kGlobalBatch / 2});  // tp = 4, accumulating
  return out;
}

INSTANTIATE_TEST_SUITE_P(Strategies, LoraEquivalence, ::testing::ValuesIn(cases()), case_name);

// Checkpointing recomputes the adapters' terms with the rest of the block.
TEST(LoraTraining, ActivationCheckpointingFollowsTheSameCurve) {
  for (std::string mode : {"selective", "full"}) {
    Env env = kLora;
    env.push_back({"COHORT_TEST_CHECKPOINTING", mode});
    expect_same_training(reference(),
                         run("checkpointing_" + mode, "zero2", 2, 1, kGlobalBatch / 4, env), 1e-5,
                         1e-5, "zero2 with " + mode + " checkpointing");
  }
}

// After ten steps every rank's base is still the seeded initialisation, bit
// for bit, whatever the strategy shards.
TEST(LoraTraining, TheBaseNeverChanges) {
  auto config = models::preset_config("tiny");
  ASSERT_TRUE(config.is_ok());
  auto backend = models::make_cpu_backend();
  auto initial = std::move(models::Model::create(*config, {}, backend.get()).value());
  initial->init_weights(42);
  for (const auto& [strategy, tp] :
       std::vector<std::pair<std::string, int>>{{"zero3", 1}, {"fsdp2", 2}}) {
    Env env = kLora;
    env.push_back({"COHORT_TEST_BASE_CHECK", "1"});
    const WorkerRun got = run("base_" + strategy, strategy, 2, tp, kGlobalBatch / 2 * tp, env);
    for (int g = 0; g < initial->num_groups(); ++g)
      for (const models::ParamSpec& p : initial->layout().groups[g].params) {
        auto it = got.params.find("frozen." + p.name);
        ASSERT_NE(it, got.params.end()) << p.name;
        const std::vector<float> want(initial->params(g) + p.offset,
                                      initial->params(g) + p.offset + p.numel);
        EXPECT_EQ(it->second, want) << strategy << ": " << p.name << " changed";
      }
  }
}

// Gradients and moments exist for the adapters only: the DDP formulas over
// the adapters' 9,728 values (tiny, rank 4 on all seven projections).
TEST(LoraTraining, StrategiesHoldGradientsAndMomentsForTheAdaptersOnly) {
  auto config = models::preset_config("tiny");
  ASSERT_TRUE(config.is_ok());
  models::LoraConfig lora;
  lora.rank = 4;
  lora.targets.assign(std::begin(models::kAllLoraTargets), std::end(models::kAllLoraTargets));
  const size_t adapters = size_t(models::lora_parameter_count(*config, lora));
  ASSERT_EQ(adapters, 9728u);
  const std::string prefix = testing::worker_scratch("lora_memory").string();
  auto group = testing::start_ranks(testing::parallel_worker_path(),
                                    {"ddp", "1", "8", "4", "1", prefix}, 2, kLora);
  ASSERT_EQ(testing::wait_ranks(group), "");
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream in(prefix + ".rank" + std::to_string(rank) + ".memory");
    size_t params, grads, optimizer;
    ASSERT_TRUE(in >> params >> grads >> optimizer);
    EXPECT_EQ(params, adapters * sizeof(float));
    EXPECT_EQ(grads, adapters * sizeof(float));
    EXPECT_EQ(optimizer, 2 * adapters * sizeof(float));
  }
}

// A base held as bf16 (LoRA's default) or NF4 / FP8 (QLoRA) and expanded a
// block at a time trains the adapters exactly as an fp32 base rounded or
// round-tripped through the format on load, on one rank and sharded over two.
TEST(QLora, AHeldBaseTrainsAsTheRoundTrippedOne) {
  for (const char* format : {"bf16", "nf4", "fp8"}) {
    Env round_trip = kLora, quantized = kLora;
    round_trip.push_back({"COHORT_TEST_BASE_ROUND_TRIP", format});
    quantized.push_back({"COHORT_TEST_LORA_BASE", format});
    const std::string f(format);
    const WorkerRun want = run("rt_" + f, "ddp", 1, 1, kGlobalBatch, round_trip);
    expect_same_training(want, run("q_" + f, "ddp", 1, 1, kGlobalBatch, quantized), 1e-6, 1e-6, f + " one rank");
    expect_same_training(want, run("q_fsdp2_" + f, "fsdp2", 2, 1, kGlobalBatch / 4, quantized), 1e-5, 1e-5,
                         f + " fsdp2 on 2 ranks, accumulating");
  }
}

}  // namespace
}  // namespace cohort::parallel
