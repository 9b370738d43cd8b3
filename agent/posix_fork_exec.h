// Private: starting one worker with fork + exec (posix_fork_exec.cc).
//
// Separate from the event loop (posix_launcher.cc) because the child side has
// rules of its own: after fork in a threaded process only async-signal-safe
// calls are allowed, so everything is prepared before fork.
#pragma once

#include <sys/types.h>

#include "agent/process_launcher.h"

namespace cohort::agent {

struct StartedProcess {
  pid_t pid = -1;      // also its process group id
  int stdout_fd = -1;  // non-blocking read ends, owned by the caller
  int stderr_fd = -1;
};

// Forks and execs `options.argv` in a new process group with PDEATHSIG
// SIGKILL, default signal dispositions and mask, stdin from /dev/null. Returns
// once exec has succeeded; a failed exec (or chdir) comes back as an error
// naming the program, its child already reaped.
cohort::Result<StartedProcess> fork_exec_worker(const SpawnOptions& options);

}  // namespace cohort::agent
