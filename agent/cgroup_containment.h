// CgroupContainment: every worker's process tree in a cgroup v2 of its own,
// so that ending a worker ends everything it started: setsid'd daemons,
// double forks, and processes whose keeper was killed too. One group per
// launcher instance, inside the cgroup the agent (or `cohort run`) was
// started in, which the host must delegate to it (systemd: Delegate=yes):
//
//   <own cgroup>/cohort-<owner>-<pid>/<job>-<attempt>/rank-<R>
//
// Killing uses cgroup.kill (Linux 5.14+), else freezes the cgroup and
// SIGKILLs every process in it (nothing can fork in between). No controller
// is enabled, so the agent may stay in its own cgroup beside these.
//
// Leftovers: an instance holds an flock on its group's directory as long as
// it lives; the kernel drops it when the process dies, by kill -9 too. open()
// first kills and removes every cohort-* sibling nobody holds: what a killed
// agent or `cohort run` left behind (workers whose keepers died with it).
//
// Where the hierarchy is not a writable cgroup v2 (cgroup v1 only, a
// read-only mount, no delegation), open() fails saying why, and the launcher
// contains workers with its child subreaper alone (posix_fork_exec.h).
//
// Threading: not thread-safe; the launcher's event thread owns it.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"

namespace cohort::agent {

// The cgroup v2 directory this process is in, from /proc/self/cgroup and
// the cgroup2 mount in /proc/self/mountinfo; an error naming what is missing
// (no cgroup v2 mount, a process outside the mounted part of the tree).
Result<std::string> own_cgroup_dir();

struct CgroupOptions {
  std::string parent;  // a cgroup v2 directory; empty: own_cgroup_dir()
  std::string owner;   // names the instance's group: cohort-<owner>-<pid>
  // False: kill by freezing and SIGKILLing every pid, as before Linux 5.14
  // (tests take that path on new kernels too).
  bool use_kill_file = true;
};

// A worker's cgroup: where it is, and its cgroup.procs opened for writing,
// so that the worker can move itself in between fork and exec with one
// write() of "0".
struct WorkerCgroup {
  std::string path;
  int procs_fd = -1;  // owned: close it once the worker has started
};

class CgroupContainment {
 public:
  static Result<std::unique_ptr<CgroupContainment>> open(const CgroupOptions& options);
  // Kills what is left in the instance's group and removes it.
  ~CgroupContainment();
  CgroupContainment(const CgroupContainment&) = delete;
  CgroupContainment& operator=(const CgroupContainment&) = delete;

  const std::string& dir() const { return dir_; }
  // Processes found (and killed) in leftover groups when this one opened.
  int leftovers_killed() const { return leftovers_killed_; }

  // Creates <dir>/<group>/<name> (names made safe for a path; a name in use
  // gets a suffix).
  Result<WorkerCgroup> create(const std::string& group, const std::string& name);
  // SIGKILLs every process in the cgroup at `path` and below. The processes
  // are gone soon after, not necessarily on return.
  Status kill(const std::string& path) const;
  // True while any process is in the cgroup at `path` or below.
  bool populated(const std::string& path) const;
  // Removes the cgroup at `path` (a worker's) and its group once that is
  // empty; false while processes are left in it.
  bool remove(const std::string& path) const;

 private:
  CgroupContainment(std::string dir, int lock_fd, bool use_kill_file)
      : dir_(std::move(dir)), lock_fd_(lock_fd), use_kill_file_(use_kill_file) {}

  std::string dir_;
  int lock_fd_;
  bool use_kill_file_;
  int leftovers_killed_ = 0;
};

}  // namespace cohort::agent
