#include "tests/infer/infer_job_fixture.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace cohort::testing {
namespace fs = std::filesystem;
namespace {

// Starts `world` ranks of a torchrun-style job (RANK, WORLD_SIZE,
// MASTER_ADDR/PORT) that inherit this process's environment, GPU visibility
// included; kills them all when one fails or the deadline passes. Returns ""
// when every rank exited 0, else what went wrong.
std::string launch_ranks(const std::string& program, const std::string& job_file, int world) {
  static int port = 30000 + static_cast<int>((::getpid() * 7919) % 20000);
  const int my_port = port++;
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("RANK", std::to_string(rank).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(my_port).c_str(), 1);
      ::setenv("OMP_NUM_THREADS", "1", 1);
      ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
      ::unsetenv("COHORT_STORE");
      ::execl(program.c_str(), program.c_str(), job_file.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  std::string problem;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  std::vector<bool> done(world, false);
  int left = world;
  while (left > 0) {
    for (int r = 0; r < world; ++r) {
      int status = 0;
      if (done[r] || ::waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
      done[r] = true;
      --left;
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && problem.empty()) {
        problem = "rank " + std::to_string(r) + " ended with status " + std::to_string(status);
      }
    }
    if (left > 0 && (!problem.empty() || std::chrono::steady_clock::now() > end)) {
      if (problem.empty()) problem = "ranks did not finish within the deadline";
      for (int r = 0; r < world; ++r) {
        if (!done[r]) ::kill(pids[r], SIGKILL), ::waitpid(pids[r], nullptr, 0);
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return problem;
}

}  // namespace

fs::path scratch_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("cohort_infer_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
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
  ::setenv("COHORT_INFER_DEVICE", job.device.c_str(), 1);
  if (job.engine.empty()) ::unsetenv("COHORT_INFER_ENGINE");
  else ::setenv("COHORT_INFER_ENGINE", job.engine.c_str(), 1);
  InferRun run;
  run.error = launch_ranks(std::string(COHORT_BINARY_DIR) + "/tests/infer_test_worker",
                           job_file.string(), job.world);
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

}  // namespace cohort::testing
