// Starts N local processes as the ranks of one torchrun-style job (RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and waits for them, killing them all
// if any fails or the deadline passes. For multi-process tests.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace cohort::testing {

// A port nobody listens on now: the kernel's pick for port 0, released
// again. Rank 0 binds it moments later; fixed guesses clashed with ports
// left in use by earlier tests.
inline int pick_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  if (fd >= 0) ::close(fd);
  return port;
}

// Ranks started by start_ranks, until wait_ranks reaps them.
struct RankGroup {
  std::vector<pid_t> pids;
};

inline RankGroup start_ranks(const std::string& program, const std::vector<std::string>& args, int world,
                             const std::vector<std::pair<std::string, std::string>>& env = {}) {
  int port = pick_port();
  RankGroup group;
  for (int rank = 0; rank < world; ++rank) {
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
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(program.c_str()));
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(program.c_str(), argv.data());
      ::_exit(127);
    }
    group.pids.push_back(pid);
  }
  return group;
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
