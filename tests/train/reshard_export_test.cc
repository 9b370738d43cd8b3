// Resharding: a checkpoint saved with zero3 at dp = 4 loads into fsdp2 at
// dp = 2 and into tensor parallelism at tp = 2 with identical parameters and
// optimizer moments. Export: the Hugging Face folder cohort export writes
// loads back through the HF loader with the same logits.
#include <gtest/gtest.h>

#include "parallel/checkpoint.h"
#include "models/backend.h"
#include "hf/weights.h"
#include "hf/config_json.h"
#include "models/model.h"
#include "tests/train/train_fixture.h"

namespace cohort::testing {
namespace {

std::string zero3_checkpoint() {
  static std::string dir = [] {
    fs::path scratch = make_scratch("zero3_source");
    TrainJob job;
    job.strategy = "zero3";
    job.steps = 3;
    job.micro_batch = 2;
    fs::path file = write_job(scratch, job);
    EXPECT_EQ(run_ranks(worker_binary(), {file.string()}, 4), "");
    return parallel::latest_checkpoint((scratch / "out").string());
  }();
  return dir;
}

void expect_reshards_identically(const std::string& strategy, int world, int tp) {
  std::string source = zero3_checkpoint();
  ASSERT_FALSE(source.empty());
  fs::path out = make_scratch("reshard_" + strategy + std::to_string(tp));
  std::string worker = std::string(COHORT_BINARY_DIR) + "/tests/reshard_worker";
  ASSERT_EQ(run_ranks(worker, {source, strategy, std::to_string(tp), out.string()}, world), "");
  auto before = read_checkpoint(source);
  auto after = read_checkpoint(parallel::latest_checkpoint(out.string()));
  EXPECT_FALSE(before.empty());
  EXPECT_EQ(max_difference(before, after), 0.0);
}

TEST(Resharding, Zero3AtFourRanksLoadsIntoFsdp2AtTwo) { expect_reshards_identically("fsdp2", 2, 1); }
TEST(Resharding, Zero3AtFourRanksLoadsIntoTensorParallelTwo) { expect_reshards_identically("ddp", 2, 2); }
TEST(Resharding, Zero3AtFourRanksLoadsIntoOneRank) { expect_reshards_identically("zero1", 1, 1); }

// Expert parallelism: a tiny-moe run with its experts split over 2 ranks
// trains as the DDP run on as many ranks does (through the job file and
// cohort-worker), and its checkpoint, every expert written by the rank
// holding it, loads into one rank and back into 2, and into fsdp2 and
// zero3 at EP 2, with identical tensors.
TEST(Resharding, ExpertParallelCheckpointsLoadIntoOneRankAndBack) {
  auto run = [](const std::string& name, int ep) {
    fs::path scratch = make_scratch(name);
    TrainJob job;
    job.preset = "tiny-moe", job.expert_parallel = ep;
    job.steps = 3, job.micro_batch = 2, job.global_batch = 4, job.checkpoint_every = 3;
    job.gpus_per_node = 2;
    EXPECT_EQ(run_ranks(worker_binary(), {write_job(scratch, job).string()}, 2), "");
    return scratch / "out";
  };
  const fs::path ddp = run("moe_ddp", 1), ep = run("moe_ep2", 2);
  const auto want = read_losses(ddp), got = read_losses(ep);
  ASSERT_EQ(want.size(), 3u);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [step, loss] : want) EXPECT_NEAR(got.at(step), loss, 1e-5 * std::abs(loss)) << "step " << step;
  const std::string source = parallel::latest_checkpoint(ep.string());
  ASSERT_FALSE(source.empty());
  const auto before = read_checkpoint(source);
  ASSERT_GT(before.count("model.layers.0.mlp.experts.7.down_proj.weight#0"), 0u) << "every expert is saved";
  std::string worker = std::string(COHORT_BINARY_DIR) + "/tests/reshard_worker";
  fs::path one = make_scratch("moe_ep2_to_1"), back = make_scratch("moe_ep1_to_2");
  ASSERT_EQ(run_ranks(worker, {source, "ddp", "1", one.string(), "1"}, 1), "");
  const std::string at_one = parallel::latest_checkpoint(one.string());
  EXPECT_EQ(max_difference(before, read_checkpoint(at_one)), 0.0);
  ASSERT_EQ(run_ranks(worker, {at_one, "ddp", "1", back.string(), "2"}, 2), "");
  EXPECT_EQ(max_difference(before, read_checkpoint(parallel::latest_checkpoint(back.string()))), 0.0);
  // Into the sharded strategies at EP 2: fsdp2 on 2 ranks (each holds half
  // the dense parameters and its experts whole) and zero3 on 4 (a quarter
  // of the dense ones, half of its expert group's experts), and back.
  fs::path fsdp2 = make_scratch("moe_ep2_fsdp2"), zero3 = make_scratch("moe_ep2_zero3");
  ASSERT_EQ(run_ranks(worker, {source, "fsdp2", "1", fsdp2.string(), "2"}, 2), "");
  const std::string at_fsdp2 = parallel::latest_checkpoint(fsdp2.string());
  EXPECT_EQ(max_difference(before, read_checkpoint(at_fsdp2)), 0.0);
  ASSERT_EQ(run_ranks(worker, {at_fsdp2, "zero3", "1", zero3.string(), "2"}, 4), "");
  EXPECT_EQ(max_difference(before, read_checkpoint(parallel::latest_checkpoint(zero3.string()))), 0.0);
}

std::vector<float> logits_of(models::Model& model) {
  std::vector<int32_t> tokens = {84, 104, 101, 32, 99, 97, 116, 32};
  int n = int(tokens.size());
  model.forward_embedding(tokens.data(), nullptr, 1, n);
  for (int l = 0; l < model.config().layers; ++l) model.forward_block(l);
  model.forward_head();
  const float* logits = model.logits();
  return std::vector<float>(logits, logits + size_t(n) * model.config().vocab_size);
}

TEST(Export, HuggingFaceFolderGivesTheSameLogits) {
  std::string source = zero3_checkpoint();
  ASSERT_FALSE(source.empty());
  fs::path hf = make_scratch("export_hf");
  ASSERT_TRUE(parallel::export_checkpoint(source, hf.string()).is_ok());
  ASSERT_TRUE(fs::exists(hf / "config.json"));
  auto backend = models::make_cpu_backend();
  auto config = parallel::checkpoint_model_config(source);
  ASSERT_TRUE(config.is_ok());
  auto direct = models::Model::create(*config, {}, backend.get());
  ASSERT_TRUE(direct.is_ok());
  ASSERT_TRUE(parallel::load_checkpoint_params(source, **direct).is_ok());
  auto exported = hf::load_model(hf.string(), {}, backend.get());
  ASSERT_TRUE(exported.is_ok()) << exported.status().to_string();
  auto a = logits_of(**direct), b = logits_of(**exported);
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double(std::abs(a[i] - b[i])));
  EXPECT_EQ(worst, 0.0);
}

}  // namespace
}  // namespace cohort::testing
