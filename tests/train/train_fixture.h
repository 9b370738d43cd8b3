// Shared by the training tests: a scratch folder with a small English-like
// corpus and a job file, cohort-worker launched torchrun-style, and readers
// for metrics.jsonl and checkpoints.
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "parallel/checkpoint_format.h"
#include "tests/parallel/rank_launcher.h"

namespace cohort::testing {

namespace fs = std::filesystem;

inline std::string worker_binary() { return std::string(COHORT_BINARY_DIR) + "/bin/cohort-worker"; }

inline fs::path scratch_dir(const std::string& name) {
  return fs::temp_directory_path() / ("cohort_train_" + std::to_string(::getpid())) / name;
}

// scratch_dir(name), emptied.
inline fs::path make_scratch(const std::string& name) {
  fs::path dir = scratch_dir(name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

inline std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A deterministic corpus of short sentences: enough structure to learn from.
inline void write_corpus(const fs::path& path) {
  const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "see", "it"};
  std::ofstream out(path);
  uint64_t x = 12345;
  for (int i = 0; i < 6000; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    out << words[(x >> 33) % 12] << ((x >> 20) % 7 == 0 ? ".\n" : " ");
  }
}

struct TrainJob {
  std::string strategy = "ddp";
  int tp = 1;
  int gpus_per_node = 1;  // ranks a node runs: at least tp (tensor-parallel groups stay inside a node)
  int steps = 12;
  int micro_batch = 2;
  int global_batch = 8;
  int checkpoint_every = 4;
  std::string precision = "fp32";
  std::string extra;  // more TOML lines for [train]
  std::string preset = "tiny";
  int expert_parallel = 1;
};

inline fs::path write_job(const fs::path& dir, const TrainJob& j) {
  write_corpus(dir / "corpus.txt");
  fs::path job = dir / "job.toml";
  std::ofstream(job) << "[job]\nname = \"t\"\nkind = \"train\"\ngpus_per_node = " << j.gpus_per_node
                     << "\noutput_dir = \"" << (dir / "out").string() << "\"\n[model]\npreset = \"" << j.preset << "\"\n[parallel]\nstrategy = \"" << j.strategy
                     << "\"\ntensor_parallel = " << j.tp << "\nexpert_parallel = " << j.expert_parallel
                     << "\n[train]\ndata = \"" << (dir / "corpus.txt").string()
                     << "\"\nsteps = " << j.steps << "\nmicro_batch = " << j.micro_batch
                     << "\nglobal_batch = " << j.global_batch << "\nseq_len = 64\nlr = 1e-3\nwarmup_steps = 2"
                     << "\ncheckpoint_every = " << j.checkpoint_every << "\nprecision = \"" << j.precision << "\"\n"
                     << j.extra;
  return job;
}

inline std::vector<std::pair<std::string, std::string>> worker_env() {
  // The CPU backend even where a GPU is visible: these tests compare fp32 runs exactly.
  return {{"COHORT_COLLECTIVE_TIMEOUT_S", "20"}, {"COHORT_LOG", "warn"}, {"COHORT_DEVICE", "cpu"}};
}

// Losses by step from metrics.jsonl.
inline std::map<int, double> read_losses(const fs::path& output_dir) {
  std::map<int, double> losses;
  std::ifstream in(output_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto row = nlohmann::json::parse(line);
    if (row.contains("loss")) losses[row["step"].get<int>()] = row["loss"].get<double>();
  }
  return losses;
}

// The metrics.jsonl rows of optimizer steps (those with a loss), by step.
inline std::map<int, nlohmann::json> read_step_rows(const fs::path& output_dir) {
  std::map<int, nlohmann::json> rows;
  std::ifstream in(output_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto row = nlohmann::json::parse(line);
    if (row.contains("loss")) rows[row["step"].get<int>()] = row;
  }
  return rows;
}

// Every tensor of a checkpoint, assembled globally: name/tensor → values.
inline std::map<std::string, std::vector<float>> read_checkpoint(const std::string& dir) {
  std::map<std::string, std::vector<float>> out;
  auto pieces = parallel::read_piece_index(dir);
  EXPECT_TRUE(pieces.is_ok()) << pieces.status().to_string();
  if (!pieces.is_ok()) return out;
  std::ifstream in(fs::path(dir) / "index.json");
  auto index = nlohmann::json::parse(in);
  for (const auto& [name, shape] : index["params"].items())
    for (int t = 0; t < 3; ++t) {
      auto values = parallel::assemble_global(dir, *pieces, name, parallel::PieceTensor(t),
                                             shape.get<std::vector<int64_t>>());
      EXPECT_TRUE(values.is_ok()) << values.status().to_string();
      if (values.is_ok()) out[name + "#" + std::to_string(t)] = std::move(*values);
    }
  return out;
}

inline double max_difference(const std::map<std::string, std::vector<float>>& a,
                             const std::map<std::string, std::vector<float>>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (const auto& [name, values] : a) {
    auto it = b.find(name);
    if (it == b.end() || it->second.size() != values.size()) {
      ADD_FAILURE() << "tensor " << name << " missing or of another size";
      return 1e9;
    }
    for (size_t i = 0; i < values.size(); ++i) worst = std::max(worst, double(std::abs(values[i] - it->second[i])));
  }
  return worst;
}

// Waits until the output folder's latest checkpoint is step-N or later.
inline bool wait_for_checkpoint(const fs::path& output_dir, int step, std::chrono::seconds deadline) {
  auto end = std::chrono::steady_clock::now() + deadline;
  while (std::chrono::steady_clock::now() < end) {
    std::ifstream in(output_dir / "checkpoints" / "latest");
    std::string name;
    if (in >> name && std::stoi(name.substr(5)) >= step) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace cohort::testing
