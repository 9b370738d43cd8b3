// Private: the keeper process between the agent and one worker (see
// posix_fork_exec.h for why it exists). It runs in a child of a threaded
// process, so it uses async-signal-safe calls only: raw syscalls, no malloc,
// no locks, no C++ library calls that might allocate.
#pragma once

#include <sys/types.h>

namespace cohort::agent {

struct KeeperArgs {
  pid_t agent;        // the keeper's parent; checked after PR_SET_PDEATHSIG races
  const char* path;   // the resolved program
  char* const* argv;
  char* const* envp;
  const char* working_dir;
  int stdin_fd, stdout_fd, stderr_fd;
  int report_fd;    // write end: KeeperRecords
  int lifeline_fd;  // read end: POLLHUP once the agent closes (or loses) its end
  int exec_fd;      // write end, for the worker: closes at exec, or carries why exec failed
  int cgroup_fd;    // the worker's cgroup.procs, written by the worker before exec; -1: none
};

// Forks the worker, reports its pid and exit, kills the tree when the
// lifeline closes, then exits the way the worker did.
[[noreturn]] void run_keeper(const KeeperArgs& args);

}  // namespace cohort::agent
