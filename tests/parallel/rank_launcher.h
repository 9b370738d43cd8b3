// Starts N local processes as the ranks of one torchrun-style job (RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and waits for them, killing them all
// if any fails or the deadline passes. For multi-process tests.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace cohort::testing {

// A port rank 0 can serve the store on: below the kernel's ephemeral range
// (32768 and up), so no outgoing connection takes it between this check and
// rank 0's bind, and free on every address, as rank 0 binds them all.
inline int pick_port() {
  static unsigned state = unsigned(::getpid()) * 2654435761u ^ unsigned(::time(nullptr));
  for (int attempt = 0; attempt < 200; ++attempt) {
    state = state * 1664525u + 1013904223u;
    int port = 20000 + int((state >> 8) % 12000);
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) continue;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(uint16_t(port));
    bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    if (free) return port;
  }
  return 29500;
}

// Ranks started by start_ranks, until wait_ranks reaps them.
struct RankGroup {
  std::vector<pid_t> pids;
};

// Each rank's own arguments, environment (applied last) and output file ("":
// this process's stdout and stderr), for ranks that stand for different nodes.
struct RankSetup {
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;
  std::string output;
};

inline RankGroup start_ranks_each(const std::string& program, int world,
                                  const std::function<RankSetup(int rank)>& setup_of) {
  int port = pick_port();
  RankGroup group;
  for (int rank = 0; rank < world; ++rank) {
    RankSetup setup = setup_of(rank);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("RANK", std::to_string(rank).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      ::setenv("OMP_NUM_THREADS", "1", 1);
      ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
      ::unsetenv("COHORT_STORE");
      for (const auto& [k, v] : setup.env) ::setenv(k.c_str(), v.c_str(), 1);
      if (!setup.output.empty()) {
        int fd = ::open(setup.output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
          ::dup2(fd, 1);
          ::dup2(fd, 2);
          ::close(fd);
        }
      }
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(program.c_str()));
      for (const auto& a : setup.args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(program.c_str(), argv.data());
      ::_exit(127);
    }
    group.pids.push_back(pid);
  }
  return group;
}

inline RankGroup start_ranks(const std::string& program, const std::vector<std::string>& args, int world,
                             const std::vector<std::pair<std::string, std::string>>& env = {}) {
  return start_ranks_each(program, world, [&](int) { return RankSetup{args, env, ""}; });
}

// Returns "" when every rank exited 0, else what went wrong. With
// `expect_failure`, a failing rank does not kill the others: they are left to
// notice by themselves (a dead peer must make them fail, not hang).
inline std::string wait_ranks(RankGroup& group, std::chrono::seconds deadline = std::chrono::seconds(120),
                              bool expect_failure = false) {
  int world = int(group.pids.size());
  std::string problem;
  auto end = std::chrono::steady_clock::now() + deadline;
  size_t done = 0;
  std::vector<bool> finished(world, false);
  bool timed_out = false;
  while (done < group.pids.size()) {
    for (int r = 0; r < world; ++r) {
      if (finished[r]) continue;
      int status = 0;
      if (::waitpid(group.pids[r], &status, WNOHANG) == group.pids[r]) {
        finished[r] = true;
        ++done;
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && problem.empty())
          problem = "rank " + std::to_string(r) + " ended with status " + std::to_string(status);
      }
    }
    timed_out = std::chrono::steady_clock::now() > end;
    if ((!problem.empty() && !expect_failure) || timed_out) {
      if (timed_out) problem = "ranks did not finish within the deadline";
      for (int r = 0; r < world; ++r)
        if (!finished[r]) ::kill(group.pids[r], SIGKILL);
      for (int r = 0; r < world; ++r)
        if (!finished[r]) ::waitpid(group.pids[r], nullptr, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  group.pids.clear();
  return problem;
}

inline std::string run_ranks(const std::string& program, const std::vector<std::string>& args, int world,
                             std::chrono::seconds deadline = std::chrono::seconds(120)) {
  RankGroup group = start_ranks(program, args, world);
  return wait_ranks(group, deadline);
}

}  // namespace cohort::testing
