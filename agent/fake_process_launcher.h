// FakeProcessLauncher: a ProcessLauncher that starts nothing, for tests of
// the agent's supervision logic. It records every spawn; the test plays the
// workers' part (emit_line, exit) and sees what the agent asked for (the
// options of each spawn, the signals each worker got).
//
// Thread-safe. Callbacks run on the thread that calls emit_line/exit, with
// no lock held.
#pragma once

#include <atomic>
#include <mutex>
#include <vector>

#include "agent/process_launcher.h"

namespace cohort::agent {

class FakeProcessLauncher final : public ProcessLauncher {
 public:
  // What the fake did with one spawn; index = order of spawn calls.
  struct Record {
    SpawnOptions options;
    int pid = 0;
    std::vector<int> signals;                      // signal_group() calls, in order
    std::vector<std::chrono::milliseconds> stops;  // stop() grace periods, in order
  };

  cohort::Result<std::shared_ptr<ProcessHandle>> spawn(SpawnOptions options) override;

  // The next spawn fails with `status` (e.g. "cannot run 'x': not found").
  void fail_next_spawn(cohort::Status status);
  // When true, stop() ends the worker at once with SIGTERM, like a worker
  // that honours it; when false (the default) the test decides.
  void set_exit_on_stop(bool exit_on_stop);

  size_t spawn_count() const;
  Record record(size_t index) const;  // a copy; index < spawn_count()
  std::shared_ptr<ProcessHandle> handle(size_t index) const;

  // Plays worker `index`: a line of output, then (once) its exit. exit()
  // returns false if that worker had already exited.
  void emit_line(size_t index, OutputStream stream, std::string_view line);
  bool exit(size_t index, ExitStatus status);

 private:
  class FakeProcess;
  friend class FakeProcess;

  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<FakeProcess>> processes_;  // GUARDED_BY(mutex_)
  std::optional<cohort::Status> next_failure_;           // GUARDED_BY(mutex_)
  // Shared with the processes, so set_exit_on_stop reaches those already spawned.
  const std::shared_ptr<std::atomic<bool>> exit_on_stop_ =
      std::make_shared<std::atomic<bool>>(false);
  int next_pid_ = 100000;  // GUARDED_BY(mutex_)
};

}  // namespace cohort::agent
