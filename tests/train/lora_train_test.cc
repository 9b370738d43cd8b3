// LoRA runs end to end on CPU ranks: checkpoints hold the adapters (and their
// moments) only, with a PEFT adapter folder under PEFT's exact names that
// reads back to the same tensors; a run resumed from a checkpoint repeats the
// uninterrupted one; `[lora] adapter` starts from a PEFT folder; the merged
// export and a LoRA checkpoint loaded for inference give the adapted model's
// logits; and `cohort run` of jobs/examples/lora.toml trains and exports.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "hf/load_quantization.h"
#include "hf/peft_adapter.h"
#include "hf/weights.h"
#include "models/lora.h"
#include "parallel/checkpoint.h"
#include "tests/train/train_fixture.h"

namespace cohort::testing {
namespace {

constexpr const char* kLoraSection =
    "[lora]\nrank = 4\nalpha = 8\ntarget_modules = \"all-linear\"\n";

TrainJob lora_job(const std::string& strategy = "zero2") {
  TrainJob job;
  job.strategy = strategy;
  job.steps = 8;
  job.extra = kLoraSection;
  return job;
}

fs::path run_job(const std::string& name, const TrainJob& job, int world,
                 const std::vector<std::string>& sets = {}) {
  fs::path dir = make_scratch(name);
  std::vector<std::string> args = {write_job(dir, job).string()};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  RankGroup group = start_ranks(worker_binary(), args, world, worker_env());
  EXPECT_EQ(wait_ranks(group), "") << name;
  return dir;
}

std::vector<float> logits_of(models::Model& model) {
  std::vector<int32_t> tokens = {84, 104, 101, 32, 99, 97, 116, 32, 115, 97, 116};
  const int n = int(tokens.size());
  model.forward(tokens.data(), nullptr, 1, n);
  return std::vector<float>(model.logits(), model.logits() + size_t(n) * model.config().vocab_size);
}

double max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    worst = std::max(worst, double(std::abs(a[i] - b[i])));
  return worst;
}

// The tiny preset with the trained adapters from a PEFT folder on the seeded,
// bf16-rounded base: the adapted model as the trainer ran it.
struct AdaptedFromFolder {
  std::unique_ptr<models::Backend> backend = models::make_cpu_backend();
  std::unique_ptr<models::Model> model;
  std::unique_ptr<models::LoraAdapters> lora;
  explicit AdaptedFromFolder(const fs::path& adapter, bool nf4_base = false) {
    auto config = hf::read_peft_config(adapter.string());
    EXPECT_TRUE(config.is_ok()) << config.status().to_string();
    model = std::move(models::Model::create(*models::preset_config("tiny"), {}, backend.get(), {},
                                            models::Model::Buffers::kParamsOnly)
                          .value());
    model->init_weights(1234);  // train.seed's default
    models::round_frozen_base(*model, DType::kBF16);
    if (nf4_base) {
      EXPECT_TRUE(hf::quantize_round_trip(*model, models::quant::WeightFormat::kNf4).is_ok());
    }
    lora = std::move(models::LoraAdapters::create(*model, config->lora).value());
    Status loaded = hf::load_peft_adapter(adapter.string(), *lora);
    EXPECT_TRUE(loaded.is_ok()) << loaded.to_string();
    model->set_lora(lora.get());
  }
};

TEST(LoraRun, CheckpointsHoldTheAdaptersAndAPeftFolderUnderPeftsNames) {
  fs::path dir = run_job("lora_checkpoint", lora_job(), 2);
  const std::string ckpt = parallel::latest_checkpoint((dir / "out").string());
  ASSERT_FALSE(ckpt.empty());
  const auto state = read_checkpoint(ckpt);
  // 2 layers × 7 projections × (A, B) × (params, two moments): nothing of the base.
  EXPECT_EQ(state.size(), 2u * 7 * 2 * 3);
  for (const auto& [name, values] : state)
    EXPECT_EQ(name.rfind("base_model.model.model.layers.", 0), 0u) << name;
  // PEFT's own spelling, checked literally.
  for (const char* name : {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
                           "base_model.model.model.layers.0.self_attn.o_proj.lora_B.weight",
                           "base_model.model.model.layers.1.mlp.gate_proj.lora_A.weight",
                           "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"})
    EXPECT_TRUE(state.count(std::string(name) + "#0")) << name;
  const fs::path adapter = fs::path(ckpt) / "adapter";
  ASSERT_TRUE(fs::exists(adapter / "adapter_model.safetensors"));
  auto config = nlohmann::json::parse(read_text(adapter / "adapter_config.json"));
  EXPECT_EQ(config["peft_type"], "LORA");
  EXPECT_EQ(config["task_type"], "CAUSAL_LM");
  EXPECT_EQ(config["r"], 4);
  EXPECT_EQ(config["lora_alpha"], 8);
  EXPECT_EQ(config["bias"], "none");
  EXPECT_EQ(config["use_rslora"], false);
  EXPECT_EQ(config["target_modules"].size(), 7u);
  // The folder's tensors are the checkpoint's adapters, bit for bit, in PEFT's shapes.
  auto file = hf::SafetensorsFile::open((adapter / "adapter_model.safetensors").string());
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  EXPECT_EQ((*file)->tensors().size(), 2u * 7 * 2);
  EXPECT_EQ((*file)->find("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight")->shape,
            (std::vector<int64_t>{4, 64}));
  EXPECT_EQ((*file)->find("base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight")->shape,
            (std::vector<int64_t>{128, 4}));
  for (const auto& [name, info] : (*file)->tensors()) {
    std::vector<float> values(state.at(name + "#0").size());
    ASSERT_TRUE((*file)->read_f32(name, values.data()).is_ok());
    EXPECT_EQ(values, state.at(name + "#0")) << name;
  }
  // And read back through the loader into fresh adapters: the same tensors again.
  AdaptedFromFolder loaded(adapter);
  for (int g = 0; g < loaded.lora->num_groups(); ++g)
    for (const models::ParamSpec& p : loaded.lora->layout().groups[g].params) {
      const std::vector<float> got(loaded.lora->params(g) + p.offset,
                                   loaded.lora->params(g) + p.offset + p.numel);
      EXPECT_EQ(got, state.at(p.name + "#0")) << p.name;
    }
}

// LoRA on a mixture of experts whose frozen experts split over 2 ranks
// (expert_parallel = 2, fsdp2): it trains as the same job without expert
// parallelism, and its checkpoint holds the attention adapters only, with
// their PEFT folder.
TEST(LoraRun, OnAMixtureOfExpertsSplitOverTwoRanksTrainsAsWithoutAndCheckpointsItsAdapters) {
  auto job = [](int ep) {
    TrainJob j = lora_job("fsdp2");
    j.preset = "tiny-moe", j.expert_parallel = ep;
    j.steps = 3, j.micro_batch = 2, j.global_batch = 4, j.checkpoint_every = 3, j.gpus_per_node = 2;
    j.extra = "[lora]\nrank = 4\nalpha = 8\ntarget_modules = [\"q_proj\", \"k_proj\", \"v_proj\", \"o_proj\"]\n";
    return j;
  };
  const fs::path plain = run_job("lora_moe_ep1", job(1), 2), split = run_job("lora_moe_ep2", job(2), 2);
  const auto want = read_losses(plain / "out"), got = read_losses(split / "out");
  ASSERT_EQ(want.size(), 3u);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [step, loss] : want) EXPECT_NEAR(got.at(step), loss, 1e-5 * std::abs(loss)) << "step " << step;
  const std::string ckpt = parallel::latest_checkpoint((split / "out").string());
  ASSERT_FALSE(ckpt.empty());
  const auto state = read_checkpoint(ckpt);
  // 2 layers × 4 projections × (A, B) × (params, two moments): no expert of the base.
  EXPECT_EQ(state.size(), 2u * 4 * 2 * 3);
  for (const auto& [name, values] : state) EXPECT_NE(name.find("self_attn"), std::string::npos) << name;
  EXPECT_TRUE(fs::exists(fs::path(ckpt) / "adapter" / "adapter_model.safetensors"));
  EXPECT_LE(max_difference(state, read_checkpoint(parallel::latest_checkpoint((plain / "out").string()))), 1e-5)
      << "the adapters end where the run without expert parallelism ends";
}

// The same run resumed from its step-4 checkpoint repeats steps 5..8 and ends
// with the same adapters and moments: the checkpoint carried them all.
TEST(LoraRun, ResumesFromItsCheckpointOnTheSameCurve) {
  const TrainJob job = lora_job("fsdp2");
  fs::path straight = run_job("lora_straight", job, 2);
  fs::path resumed = make_scratch("lora_resumed");
  fs::path file = write_job(resumed, job);
  fs::create_directories(resumed / "out" / "checkpoints");
  fs::copy(straight / "out" / "checkpoints" / "step-4", resumed / "out" / "checkpoints" / "step-4",
           fs::copy_options::recursive);
  std::ofstream(resumed / "out" / "checkpoints" / "latest") << "step-4\n";
  RankGroup group = start_ranks(worker_binary(), {file.string()}, 2, worker_env());
  ASSERT_EQ(wait_ranks(group), "");
  const auto want = read_losses(straight / "out"), got = read_losses(resumed / "out");
  ASSERT_EQ(want.size(), 8u);
  for (int step = 5; step <= 8; ++step)
    EXPECT_NEAR(got.at(step), want.at(step), 1e-6 * want.at(step)) << step;
  EXPECT_LE(
      max_difference(read_checkpoint(parallel::latest_checkpoint((straight / "out").string())),
                     read_checkpoint(parallel::latest_checkpoint((resumed / "out").string()))),
      1e-6);
}

// A job naming a PEFT folder starts from its adapters (at a vanishing
// learning rate they are still the folder's after a step), and a LoRA
// checkpoint refuses a resume by a job without [lora].
TEST(LoraRun, StartsFromAPeftAdapterFolder) {
  fs::path first = run_job("lora_first", lora_job(), 1);
  const fs::path adapter =
      fs::path(parallel::latest_checkpoint((first / "out").string())) / "adapter";
  TrainJob job = lora_job();
  job.steps = 1;
  job.extra = "[lora]\nadapter = \"" + adapter.string() + "\"\n";
  fs::path second = run_job("lora_second", job, 1, {"train.lr=1e-12", "train.warmup_steps=0"});
  const auto start = read_checkpoint(parallel::latest_checkpoint((first / "out").string()));
  const auto after = read_checkpoint(parallel::latest_checkpoint((second / "out").string()));
  double worst = 0, largest_b = 0;
  for (const auto& [name, values] : start) {
    if (name.back() != '0') continue;  // parameters, not moments
    const auto& now = after.at(name);
    for (size_t i = 0; i < values.size(); ++i) {
      worst = std::max(worst, double(std::abs(now[i] - values[i])));
      if (name.find("lora_B") != std::string::npos)
        largest_b = std::max(largest_b, double(std::abs(values[i])));
    }
  }
  EXPECT_LT(worst, 1e-7);
  EXPECT_GT(largest_b, 1e-4) << "trained adapters, not a fresh initialisation";

  TrainJob full = lora_job();
  full.extra = "";
  fs::path refused = make_scratch("lora_refused");
  fs::path file = write_job(refused, full);
  fs::copy(first / "out", refused / "out", fs::copy_options::recursive);
  RankGroup group = start_ranks(worker_binary(), {file.string()}, 1, worker_env());
  EXPECT_NE(wait_ranks(group, std::chrono::seconds(60), /*expect_failure=*/true), "");
}

// W + scale · B A in a plain model (export --merge, and a LoRA checkpoint as
// [model] checkpoint) gives the logits of the base running the adapters.
TEST(LoraRun, MergedExportGivesTheAdaptedLogits) {
  fs::path dir = run_job("lora_merge", lora_job("zero3"), 2);
  const std::string ckpt = parallel::latest_checkpoint((dir / "out").string());
  AdaptedFromFolder adapted(fs::path(ckpt) / "adapter");
  const std::vector<float> want = logits_of(*adapted.model);

  fs::path merged = make_scratch("lora_merged");
  ASSERT_TRUE(
      parallel::export_checkpoint(ckpt, merged.string(), DType::kF32, /*merge=*/true).is_ok());
  auto backend = models::make_cpu_backend();
  auto exported = hf::load_model(merged.string(), {}, backend.get());
  ASSERT_TRUE(exported.is_ok()) << exported.status().to_string();
  EXPECT_LT(max_abs_difference(logits_of(**exported), want), 1e-4);

  auto direct = models::Model::create(*parallel::checkpoint_model_config(ckpt), {}, backend.get());
  ASSERT_TRUE(direct.is_ok());
  ASSERT_TRUE(parallel::load_checkpoint_params(ckpt, **direct).is_ok());
  EXPECT_EQ(max_abs_difference(logits_of(**direct), logits_of(**exported)), 0.0);

  // Without --merge the export is the PEFT folder; --merge of a full-model checkpoint is refused.
  fs::path peft = make_scratch("lora_peft_export");
  ASSERT_TRUE(parallel::export_checkpoint(ckpt, peft.string()).is_ok());
  EXPECT_TRUE(fs::exists(peft / "adapter_config.json"));
  EXPECT_TRUE(fs::exists(peft / "adapter_model.safetensors"));
  TrainJob full = lora_job();
  full.extra = "";
  fs::path plain = run_job("lora_plain", full, 1);
  Status refused =
      parallel::export_checkpoint(parallel::latest_checkpoint((plain / "out").string()),
                                  make_scratch("lora_plain_export").string(), DType::kF32, true);
  EXPECT_NE(refused.message().find("is a full-model checkpoint"), std::string::npos)
      << refused.to_string();
}

// QLoRA end to end: a run on an NF4 base trains, prints its sample (bytes
// a barely trained model strings together, which metrics.jsonl must hold
// as valid JSON), and its merged export is the adapters on the base
// round-tripped through NF4.
TEST(LoraRun, AnNf4BaseTrainsSamplesAndMergesIntoItsRoundTrippedBase) {
  TrainJob job = lora_job("zero2");
  job.extra += "base_dtype = \"nf4\"\n";
  fs::path dir = run_job("qlora", job, 2, {"train.sample_tokens=32"});
  std::ifstream metrics(dir / "out" / "metrics.jsonl");
  bool sampled = false;
  for (std::string line; std::getline(metrics, line);) {
    auto row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(row.is_discarded()) << line;
    sampled = sampled || row.contains("sample");
  }
  EXPECT_TRUE(sampled);
  const std::string ckpt = parallel::latest_checkpoint((dir / "out").string());
  AdaptedFromFolder adapted(fs::path(ckpt) / "adapter", /*nf4_base=*/true);
  fs::path merged = make_scratch("qlora_merged");
  ASSERT_TRUE(parallel::export_checkpoint(ckpt, merged.string(), DType::kF32, /*merge=*/true).is_ok());
  auto backend = models::make_cpu_backend();
  auto exported = hf::load_model(merged.string(), {}, backend.get());
  ASSERT_TRUE(exported.is_ok()) << exported.status().to_string();
  EXPECT_LT(max_abs_difference(logits_of(**exported), logits_of(*adapted.model)), 1e-4);
}

int run_command(const std::string& command, std::string* output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) output->append(buffer, n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(LoraRun, TheExampleJobRunsWithCohortRunAndExports) {
  const std::string bin = std::string(COHORT_BINARY_DIR) + "/bin/cohort";
  fs::path dir = make_scratch("lora_example");
  std::string out;
  const std::string run =
      bin + " run " + COHORT_SOURCE_DIR +
      "/jobs/examples/lora.toml --set job.output_dir=" + (dir / "run").string() +
      " --set train.steps=3 --set train.seq_len=32 --set train.micro_batch=2" +
      " --set train.global_batch=4 --set train.checkpoint_every=0 --set train.warmup_steps=1";
  ASSERT_EQ(run_command(run, &out), 0) << out;
  EXPECT_NE(out.find("parallel: LoRA rank 16, alpha 32 (scale 2)"), std::string::npos) << out;
  const std::string ckpt = parallel::latest_checkpoint((dir / "run").string());
  ASSERT_TRUE(fs::exists(fs::path(ckpt) / "adapter" / "adapter_config.json")) << out;
  out.clear();
  ASSERT_EQ(run_command(bin + " export " + (dir / "run").string() + " --to " +
                            (dir / "merged").string() + " --merge",
                        &out),
            0)
      << out;
  EXPECT_TRUE(fs::exists(dir / "merged" / "config.json")) << out;
  EXPECT_TRUE(fs::exists(dir / "merged" / "model.safetensors")) << out;
}

}  // namespace
}  // namespace cohort::testing
