// run_processes: fork/exec with output to temporary files.
#include "tests/collective/process_group.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace cohort::collective::testing {

namespace {

bool launcher_variable(const std::string& entry) {
  for (const char* prefix :
       {"COHORT_STORE=", "MASTER_ADDR=", "MASTER_PORT=", "RANK=", "WORLD_SIZE=", "LOCAL_RANK=",
        "LOCAL_WORLD_SIZE=", "OMPI_COMM_WORLD", "PMI", "SLURM_"}) {
    if (entry.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

}  // namespace

std::string test_binary(const std::string& name) {
  return std::string(COHORT_BINARY_DIR) + "/tests/" + name;
}

std::vector<ProcessResult> run_processes(const std::vector<ProcessSpec>& specs,
                                         std::chrono::seconds timeout) {
  std::vector<ProcessResult> results(specs.size());
  std::vector<pid_t> pids(specs.size(), -1);
  std::vector<std::string> logs(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    char path[] = "/tmp/cohort-collective-XXXXXX";
    int fd = ::mkstemp(path);
    logs[i] = path;
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      if (!launcher_variable(*e)) env.emplace_back(*e);
    }
    for (const auto& [k, v] : specs[i].env) env.push_back(k + "=" + v);
    std::vector<char*> argv, envp;
    for (const auto& a : specs[i].argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::setpgid(0, 0);  // its own group: a timeout kills mpirun's children too
      ::execvpe(argv[0], argv.data(), envp.data());
      std::fprintf(stderr, "exec %s: %s\n", argv[0], std::strerror(errno));
      ::_exit(127);
    }
    ::close(fd);
    pids[i] = pid;
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t left = specs.size();
  while (left > 0) {
    for (size_t i = 0; i < specs.size(); ++i) {
      if (pids[i] < 0) continue;
      int status = 0;
      pid_t r = ::waitpid(pids[i], &status, WNOHANG);
      if (r == 0) continue;
      if (WIFEXITED(status)) results[i].exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) results[i].signal = WTERMSIG(status);
      pids[i] = -1;
      --left;
    }
    if (left > 0 && std::chrono::steady_clock::now() > deadline) {
      for (size_t i = 0; i < specs.size(); ++i) {
        if (pids[i] < 0) continue;
        ::kill(-pids[i], SIGKILL);
        ::kill(pids[i], SIGKILL);
        ::waitpid(pids[i], nullptr, 0);
        results[i].timed_out = true;
        pids[i] = -1;
        --left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    std::ifstream in(logs[i]);
    std::stringstream ss;
    ss << in.rdbuf();
    results[i].output = ss.str();
    ::unlink(logs[i].c_str());
  }
  return results;
}

std::string describe(const std::vector<ProcessResult>& results) {
  std::string out;
  for (size_t i = 0; i < results.size(); ++i) {
    out += "--- process " + std::to_string(i) + " exit " + std::to_string(results[i].exit_code) +
           " signal " + std::to_string(results[i].signal) +
           (results[i].timed_out ? " TIMED OUT" : "") + "\n" + results[i].output;
  }
  return out;
}

}  // namespace cohort::collective::testing
