// The job file that `cohort run --nproc-per-node N -- PROGRAM ARGS...` stands
// for, as torchrun users launch: a command job of N workers per node running
// PROGRAM ARGS with the torchrun environment (DESIGN §4's launch contract),
// named after the script (train.py → "train") or else the program. Loading
// the text (load_job_text) then applies --set overrides, defaults and checks
// exactly as for a file.
#pragma once

#include <string>
#include <vector>

namespace cohort::jobs {

std::string command_line_job_toml(const std::vector<std::string>& argv, int nproc_per_node, int nnodes);

// The job file that `cohort serve MODEL [flags]` stands for, as `vllm serve`
// users launch: a serve job of `tensor_parallel` workers over MODEL, which
// is a Hugging Face folder, a model id found in the local Hugging Face cache
// (ORG/NAME), or a cohort checkpoint (a folder holding index.json, a
// `latest` file, or a run's output_dir with checkpoints/). Named after the
// model; output_dir runs/serve-<name>. Fields left at 0 or "" keep the
// job file's defaults.
struct ServeCommandLine {
  std::string model;
  std::string host;             // "": 127.0.0.1
  int port = -1;                // -1: 8000
  int tensor_parallel = 1;
  std::string api_key;
  std::string served_model_name;
  int max_running = 0;
  int context = 0;
  std::string adapter;          // a PEFT adapter folder merged into the model ([model] adapter)
  // --lora-modules NAME=DIR (vLLM's spelling): adapters served beside the base ([serve.adapters]).
  std::vector<std::string> lora_modules;
};
std::string serve_job_toml(const ServeCommandLine& line);

}  // namespace cohort::jobs
