// Runs parallel_worker as the ranks of one job and reads back what rank 0
// recorded: per-step losses, gradient norms and whether each update was
// applied, and the final parameters as global tensors.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "tests/parallel/param_file.h"
#include "tests/parallel/rank_launcher.h"

namespace cohort::testing {

using Env = std::vector<std::pair<std::string, std::string>>;

struct WorkerRun {
  std::vector<double> losses;
  std::vector<double> norms;  // -1 where the step was skipped
  std::vector<bool> applied;
  std::map<std::string, std::vector<float>> params;  // global tensors by HF name
};

inline std::filesystem::path worker_scratch(const std::string& name) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("cohort_parallel_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

inline std::string parallel_worker_path() { return std::string(COHORT_BINARY_DIR) + "/tests/parallel_worker"; }

// What rank 0 wrote (losses) and every parameter file: one per tp slice,
// and under expert parallelism one per rank of the first expert group.
inline void read_run_outputs(const std::string& prefix, int tp, WorkerRun* result) {
  std::ifstream losses(prefix + ".rank0.losses");
  int step, applied;
  double loss, norm;
  while (losses >> step >> loss >> norm >> applied) {
    result->losses.push_back(loss);
    result->norms.push_back(norm);
    result->applied.push_back(applied != 0);
  }
  for (int t = 0; t < tp; ++t) {
    const std::string slice = prefix + ".tp" + std::to_string(t);
    read_params(slice + ".params", &result->params);
    for (int e = 1; std::filesystem::exists(slice + ".ep" + std::to_string(e) + ".params"); ++e)
      read_params(slice + ".ep" + std::to_string(e) + ".params", &result->params);
  }
}

// `tag` names the run's files (runs with different env need different tags).
inline WorkerRun run_worker(const std::string& tag, const std::string& strategy, int world, int tp, int global_batch,
                            int micro, int steps, const Env& env = {}) {
  std::string prefix = worker_scratch(tag + "_" + strategy + "_w" + std::to_string(world) + "_tp" +
                                      std::to_string(tp) + "_m" + std::to_string(micro))
                           .string();
  auto group = start_ranks(parallel_worker_path(),
                           {strategy, std::to_string(tp), std::to_string(global_batch), std::to_string(micro),
                            std::to_string(steps), prefix},
                           world, env);
  std::string problem = wait_ranks(group);
  EXPECT_EQ(problem, "") << tag << " " << strategy << " world " << world;
  WorkerRun result;
  read_run_outputs(prefix, tp, &result);
  return result;
}

// The same run as MPI ranks: one mpirun of `world` parallel_worker
// processes (as root in CI, hence the allow flags), its output in
// PREFIX.mpirun.log.
inline WorkerRun run_worker_mpi(const std::string& tag, const std::string& strategy, int world, int tp,
                                int global_batch, int micro, int steps, const Env& env = {}) {
  std::string prefix = worker_scratch(tag + "_mpi_" + strategy + "_w" + std::to_string(world) + "_tp" +
                                      std::to_string(tp) + "_m" + std::to_string(micro))
                           .string();
  const std::vector<std::string> argv = {"mpirun", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none",
                                         "-np", std::to_string(world), parallel_worker_path(), strategy,
                                         std::to_string(tp), std::to_string(global_batch), std::to_string(micro),
                                         std::to_string(steps), prefix};
  pid_t pid = ::fork();
  if (pid == 0) {
    for (const char* launcher : {"COHORT_STORE", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"})
      ::unsetenv(launcher);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    // Containers often forbid the cross-memory attach vader uses.
    ::setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
    ::setenv("OMP_NUM_THREADS", "1", 1);
    ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    int fd = ::open((prefix + ".mpirun.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) ::dup2(fd, 1), ::dup2(fd, 2), ::close(fd);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp("mpirun", args.data());
    ::_exit(127);
  }
  RankGroup group;
  group.pids.push_back(pid);
  std::string problem = wait_ranks(group, std::chrono::seconds(180));
  std::ifstream log(prefix + ".mpirun.log");
  std::string output((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_EQ(problem, "") << tag << " mpirun " << strategy << " world " << world << ":\n" << output;
  WorkerRun result;
  read_run_outputs(prefix, tp, &result);
  return result;
}

// Per-step losses within `loss_relative` and final parameters within
// `param_absolute` of a reference run of as many steps.
inline void expect_same_training(const WorkerRun& want, const WorkerRun& got, double loss_relative,
                                 double param_absolute, const std::string& what) {
  ASSERT_FALSE(want.losses.empty()) << what;
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t s = 0; s < want.losses.size(); ++s)
    EXPECT_NEAR(got.losses[s], want.losses[s], loss_relative * std::abs(want.losses[s])) << what << " step " << s + 1;
  EXPECT_LE(max_param_difference(want.params, got.params), param_absolute) << what;
}

}  // namespace cohort::testing
