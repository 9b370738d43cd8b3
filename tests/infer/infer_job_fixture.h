// Running an inference job as real ranks (infer_test_worker under the
// torchrun-style launcher) and reading back what rank 0 wrote.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/lora.h"
#include "models/lora_config.h"
#include "models/model.h"

namespace cohort::testing {

struct InferRun {
  std::string error;  // "" when every rank exited 0, else why not and each rank's log tail
  std::vector<nlohmann::json> outputs;         // outputs.jsonl, in file order
  nlohmann::json summary;                      // summary.json
  std::map<int, std::vector<float>> logits;    // logits/<index>.f32
};

struct InferJob {
  std::string name;           // also the output folder's name
  int world = 1;
  int tensor_parallel = 0;    // 0: all ranks
  std::string model_lines;    // the [model] section's body, e.g. preset = "tiny"
  std::string infer_lines;    // extra [infer] keys
  std::string prompts_path;
  int max_new_tokens = 8;
  int batch_size = 2;
  std::string device = "cpu"; // COHORT_DEVICE
  std::string engine;         // COHORT_INFER_ENGINE ("": the default)
};

// A fresh folder under the system temp dir, unique to this test process.
std::filesystem::path scratch_dir(const std::string& name);

// The rank program these tests launch: beside the test's own executable
// where it is there (a bundle copied to another machine), else in the
// build tree.
std::string test_worker_path();

// {"tokens": [...]} per prompt.
std::string write_token_prompts(const std::filesystem::path& path,
                                const std::vector<std::vector<int>>& prompts);

InferRun run_infer_job(const InferJob& job);

// A job of three fixed token prompts, 6 new tokens, batch 3, at tp `world`:
// the runs that compare weight sources (quantized folders, adapters).
InferJob three_prompt_job(const std::string& name, const std::string& model_lines, int world);

// Both runs succeeded with the same tokens for every prompt, in order, and
// logits within `tolerance` where both have them.
void expect_same_generation(const InferRun& want, const InferRun& got, const std::string& what,
                            float tolerance = 1e-5f);

// Every value of `adapters` drawn from N(0, stddev^2) with `seed`, in
// layout order: the same adapters for the same seed on any engine's base.
void fill_random_adapters(models::LoraAdapters& adapters, uint32_t seed, float stddev);

// Random LoRA adapters on every projection of `model` (or on `targets`;
// rank 4, alpha 8; A and B drawn from N(0, stddev^2) with `seed`), written
// as a PEFT folder at `folder` over the base `base_dir`, then merged into
// `model` (W + scale · B A): the folder and what serving it must equal.
void write_random_adapter(models::Model& model, const std::string& base_dir, uint32_t seed, float stddev,
                          const std::string& folder, const std::vector<models::LoraTarget>& targets = {});

}  // namespace cohort::testing
