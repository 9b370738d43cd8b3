// OutputDirLock: one writer per output folder (issue 35). The agent that
// runs node rank 0 of a job holds an exclusive flock(2) on
// OUTPUT_DIR/.cohort.lock while that job's workers run there, so that two
// `cohort run`s, or two clusters sharing storage, cannot both write one
// folder's checkpoints and metrics. The lock file holds the holder's
// description ("job-3 on node-a, host h1, pid 4242"), so the one refused can
// say who holds it. The kernel frees the lock when its holder exits, even by
// SIGKILL; the descriptor is close-on-exec, so workers never inherit it.
//
// flock is per open file: a second lock from the same process on the same
// folder is refused like any other; the supervisor shares one lock between
// attempts of a job (supervisor.h). On NFS, flock is emulated with byte-range
// locks (Linux ≥ 2.6.12), which hold across hosts.
//
// Move-only; destroying it releases the lock. Thread-compatible.
#pragma once

#include <string>

#include "base/status.h"

namespace cohort::agent {

class OutputDirLock {
 public:
  static constexpr const char* kFileName = ".cohort.lock";

  // Takes the lock of `output_dir` (which must exist) without waiting and
  // writes `holder` into it. kFailedPrecondition naming the folder and the
  // current holder when another process holds it; kIoError otherwise.
  static Result<OutputDirLock> acquire(const std::string& output_dir, const std::string& holder);
  // Who holds the folder's lock now ("" when nobody does): the check
  // `cohort run` makes before it starts anything.
  static std::string holder_of(const std::string& output_dir);

  OutputDirLock(OutputDirLock&& other) noexcept;
  OutputDirLock& operator=(OutputDirLock&& other) noexcept;
  OutputDirLock(const OutputDirLock&) = delete;
  OutputDirLock& operator=(const OutputDirLock&) = delete;
  ~OutputDirLock();

  const std::string& output_dir() const { return output_dir_; }

 private:
  OutputDirLock(int fd, std::string output_dir) : fd_(fd), output_dir_(std::move(output_dir)) {}
  int fd_ = -1;
  std::string output_dir_;
};

// What a lock refusal says: the folder, its holder and what to do.
std::string output_dir_in_use(const std::string& output_dir, const std::string& holder);

}  // namespace cohort::agent
