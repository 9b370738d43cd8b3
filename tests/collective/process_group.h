// Launching the ranks of a test as real processes and collecting their
// output: Gloo ranks directly, MPI ranks through mpirun.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace cohort::collective::testing {

struct ProcessSpec {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // added to a cleaned copy of ours
};

struct ProcessResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  bool timed_out = false;
  std::string output;  // stdout and stderr together
};

// Starts every process, waits for all (killing the rest with SIGKILL at
// `timeout`) and returns their results in order. Launcher variables that
// would mislead a worker (COHORT_STORE, MASTER_*, RANK, OMPI_*, PMI*) are
// removed from the inherited environment first.
std::vector<ProcessResult> run_processes(const std::vector<ProcessSpec>& specs,
                                         std::chrono::seconds timeout);

// Every process's exit, signal and output, for a failing assertion's message.
std::string describe(const std::vector<ProcessResult>& results);

// The path of a binary built beside the tests.
std::string test_binary(const std::string& name);

}  // namespace cohort::collective::testing
