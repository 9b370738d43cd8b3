#include "tests/infer/infer_job_fixture.h"

#include "tests/parallel/rank_launcher.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "hf/peft_adapter.h"
#include "models/lora.h"

namespace cohort::testing {
namespace fs = std::filesystem;
namespace {

// The last `max_chars` of a rank's log, or a note that it has none.
std::string log_tail(const fs::path& path, size_t max_chars = 3000) {
  std::ifstream in(path);
  if (!in) return "(no log at " + path.string() + ")\n";
  std::ostringstream all;
  all << in.rdbuf();
  std::string text = all.str();
  if (text.size() > max_chars) text = "..." + text.substr(text.size() - max_chars);
  return text;
}

// Starts `world` ranks of a torchrun-style job (tests/parallel/rank_launcher.h)
// that keep this process's GPU visibility; kills them all when one fails or
// the deadline passes. Each rank's stdout and stderr go to
// <log_dir>/rank<r>.log (through sh, which execs the worker, so the launcher
// still holds the worker's pid); on failure the result ends with each rank's
// tail. Returns "" when every rank exited 0.
//
// The ranks fail rather than hang: every collective is bounded by
// COHORT_COLLECTIVE_TIMEOUT_S (Gloo, NCCL, and the CUDA engine's own NCCL
// calls), well inside the deadline, and COHORT_INFER_CHECK_LOCKSTEP makes a
// tensor-parallel group whose ranks call the engine differently fail at once
// (infer/engine.h, check_lockstep), even on the CPU where it would not hang.
std::string launch_ranks(const std::string& program, const std::string& job_file, int world,
                         const fs::path& log_dir) {
  RankGroup group = start_ranks(
      "/bin/sh",
      {"-c", "exec \"$0\" \"$1\" >\"$2/rank$RANK.log\" 2>&1", program, job_file, log_dir.string()},
      world, {{"COHORT_COLLECTIVE_TIMEOUT_S", "60"}, {"COHORT_INFER_CHECK_LOCKSTEP", "1"}});
  std::string error = wait_ranks(group, std::chrono::seconds(150));
  if (error.empty()) return error;
  for (int r = 0; r < world; ++r) {
    const fs::path log = log_dir / ("rank" + std::to_string(r) + ".log");
    error += "\n--- rank " + std::to_string(r) + " (" + log.string() + "):\n" + log_tail(log);
  }
  return error;
}

}  // namespace

fs::path scratch_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("cohort_infer_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string test_worker_path() {
  std::error_code error;
  const fs::path beside = fs::read_symlink("/proc/self/exe", error).parent_path() / "infer_test_worker";
  if (!error && fs::exists(beside)) return beside.string();
  return std::string(COHORT_BINARY_DIR) + "/tests/infer_test_worker";
}

std::string write_token_prompts(const fs::path& path, const std::vector<std::vector<int>>& prompts) {
  std::ofstream out(path);
  for (const auto& p : prompts) out << nlohmann::json{{"tokens", p}}.dump() << "\n";
  return path.string();
}

InferRun run_infer_job(const InferJob& job) {
  const fs::path dir = scratch_dir(job.name);
  const fs::path out_dir = dir / "out";
  std::ostringstream toml;
  toml << "[job]\nname = \"" << job.name << "\"\nkind = \"infer\"\ngpus_per_node = " << job.world
       << "\noutput_dir = \"" << out_dir.string() << "\"\n\n[model]\n" << job.model_lines
       << "\n\n[infer]\nprompts = \"" << job.prompts_path << "\"\nmax_new_tokens = "
       << job.max_new_tokens << "\nbatch_size = " << job.batch_size
       << "\ntensor_parallel = " << job.tensor_parallel << "\n" << job.infer_lines << "\n";
  const fs::path job_file = dir / "job.toml";
  std::ofstream(job_file) << toml.str();
  ::setenv("COHORT_INFER_DUMP_LOGITS", "1", 1);
  ::setenv("COHORT_DEVICE", job.device.c_str(), 1);
  if (job.engine.empty()) ::unsetenv("COHORT_INFER_ENGINE");
  else ::setenv("COHORT_INFER_ENGINE", job.engine.c_str(), 1);
  InferRun run;
  run.error = launch_ranks(test_worker_path(), job_file.string(), job.world, dir);
  if (!run.error.empty()) return run;
  std::ifstream outputs(out_dir / "outputs.jsonl");
  std::string line;
  while (std::getline(outputs, line)) run.outputs.push_back(nlohmann::json::parse(line));
  std::ifstream summary(out_dir / "summary.json");
  if (summary) run.summary = nlohmann::json::parse(summary);
  if (fs::exists(out_dir / "logits")) {
    for (const auto& entry : fs::directory_iterator(out_dir / "logits")) {
      std::ifstream in(entry.path(), std::ios::binary);
      std::vector<float> values(fs::file_size(entry.path()) / sizeof(float));
      in.read(reinterpret_cast<char*>(values.data()),
              static_cast<std::streamsize>(values.size() * sizeof(float)));
      run.logits[std::stoi(entry.path().stem().string())] = std::move(values);
    }
  }
  return run;
}


InferJob three_prompt_job(const std::string& name, const std::string& model_lines, int world) {
  InferJob job;
  job.name = name;
  job.world = world;
  job.tensor_parallel = world;
  job.model_lines = model_lines;
  job.prompts_path = write_token_prompts(scratch_dir("prompts") / (name + ".jsonl"),
                                         {{1, 2, 3}, {40, 41, 42, 43, 44}, {200, 7}});
  job.max_new_tokens = 6;
  job.batch_size = 3;
  return job;
}

void expect_same_generation(const InferRun& want, const InferRun& got, const std::string& what, float tolerance) {
  ASSERT_EQ(want.error, "") << what;
  ASSERT_EQ(got.error, "") << what;
  ASSERT_EQ(got.outputs.size(), want.outputs.size()) << what;
  for (size_t i = 0; i < want.outputs.size(); ++i) {
    EXPECT_EQ(got.outputs[i].at("index"), static_cast<int>(i)) << what;
    EXPECT_EQ(got.outputs[i].at("tokens"), want.outputs[i].at("tokens")) << what << ", prompt " << i;
  }
  ASSERT_EQ(got.logits.size(), want.logits.size()) << what;
  for (const auto& [index, values] : want.logits) {
    const std::vector<float>& other = got.logits.at(index);
    ASSERT_EQ(other.size(), values.size());
    float worst = 0;
    for (size_t i = 0; i < values.size(); ++i) worst = std::max(worst, std::fabs(other[i] - values[i]));
    EXPECT_LE(worst, tolerance) << what << ", prompt " << index;
  }
}

void fill_random_adapters(models::LoraAdapters& adapters, uint32_t seed, float stddev) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  for (int g = 0; g < adapters.num_groups(); ++g)
    for (const models::ParamSpec& p : adapters.layout().groups[g].params)
      for (size_t i = 0; i < p.numel; ++i) adapters.params(g)[p.offset + i] = dist(rng);
}

void write_random_adapter(models::Model& model, const std::string& base_dir, uint32_t seed, float stddev,
                          const std::string& folder, const std::vector<models::LoraTarget>& targets) {
  models::LoraConfig lora;
  lora.rank = 4, lora.alpha = 8;
  lora.targets = targets;
  if (targets.empty()) lora.targets.assign(std::begin(models::kAllLoraTargets), std::end(models::kAllLoraTargets));
  lora.base_dtype = models::DType::kF32;
  auto adapters = std::move(models::LoraAdapters::create(model, lora).value());
  fill_random_adapters(*adapters, seed, stddev);
  std::vector<hf::TensorToWrite> tensors;
  for (int g = 0; g < adapters->num_groups(); ++g)
    for (const models::ParamSpec& p : adapters->layout().groups[g].params)
      tensors.push_back({p.name, p.global_shape, adapters->params(g) + p.offset, models::DType::kF32});
  ASSERT_TRUE(hf::write_peft_adapter(folder, lora, base_dir, tensors).is_ok());
  ASSERT_TRUE(models::merge_lora_adapters(*adapters, model).is_ok());
}

}  // namespace cohort::testing
