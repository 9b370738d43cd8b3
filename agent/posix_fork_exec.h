// Private: starting one worker with fork + exec (posix_fork_exec.cc).
//
// Separate from the event loop (posix_launcher.cc) because the child side has
// rules of its own: after fork in a threaded process only async-signal-safe
// calls are allowed, so everything is prepared before fork.
//
// Containment: the agent forks a small keeper, which makes itself a child
// subreaper (PR_SET_CHILD_SUBREAPER) and forks the worker. Every process the
// worker starts, `setsid` ones included, is the keeper's descendant and comes
// back to it when orphaned. The keeper reports the worker's exit on the
// report pipe and then kills whatever is left of the tree when the agent
// closes its end of the lifeline pipe: at once after a plain exit, after the
// grace during a stop, and also when the agent dies (even by SIGKILL: the
// kernel closes its descriptors). The worker has PR_SET_PDEATHSIG(SIGKILL)
// towards the keeper. What escapes: a process that someone else (not the
// job) reparents, and any descendant once the keeper itself is SIGKILLed;
// where the host delegates cgroup v2, the worker's cgroup catches those too
// (cgroup_containment.h).
#pragma once

#include <sys/types.h>

#include "agent/cgroup_containment.h"
#include "agent/process_launcher.h"

namespace cohort::agent {

// What the keeper writes on the report pipe, one record per write (atomic).
struct KeeperRecord {
  enum Kind : int { kWorkerPid = 0, kChdirFailed = 1, kExecFailed = 2, kForkFailed = 3, kExited = 4, kCgroupFailed = 5 };
  int kind;
  int value;  // the worker's pid, errno, or the wait status for kExited
};

struct StartedProcess {
  pid_t pid = -1;      // the worker: also its process group id
  pid_t keeper = -1;   // its keeper, the agent's child (waitpid and pidfd on it)
  int stdout_fd = -1;  // non-blocking read ends, owned by the caller
  int stderr_fd = -1;
  int report_fd = -1;    // non-blocking: KeeperRecord::kExited arrives here
  int lifeline_fd = -1;  // closing it makes the keeper kill the rest of the tree
};

// Forks the keeper, which forks and execs `options.argv` in a new process
// group with PDEATHSIG SIGKILL, default signal dispositions and mask, stdin
// from /dev/null, inside `cgroup` when given (the worker moves itself there
// before exec). Returns once exec has succeeded; a failed exec (or chdir, or
// cgroup move) comes back as an error naming the program, its keeper
// already reaped.
cohort::Result<StartedProcess> fork_exec_worker(const SpawnOptions& options, const WorkerCgroup* cgroup);

}  // namespace cohort::agent
