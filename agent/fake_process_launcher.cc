// FakeProcessLauncher: recorded spawns, test-driven output and exits.
#include "agent/fake_process_launcher.h"

#include <signal.h>

#include <condition_variable>

#include "base/check.h"

namespace cohort::agent {

class FakeProcessLauncher::FakeProcess final : public ProcessHandle {
 public:
  FakeProcess(int pid, SpawnOptions options, std::shared_ptr<std::atomic<bool>> exit_on_stop)
      : pid_(pid), options_(std::move(options)), exit_on_stop_(std::move(exit_on_stop)) {}

  int pid() const override { return pid_; }
  cohort::Status signal_group(int sig) override {
    std::lock_guard lock(mutex_);
    signals_.push_back(sig);
    return cohort::Status::ok();
  }
  void stop(std::chrono::milliseconds grace) override {
    {
      std::lock_guard lock(mutex_);
      stops_.push_back(grace);
    }
    if (exit_on_stop_->load()) exit(ExitStatus::killed(SIGTERM));
  }
  std::optional<ExitStatus> exit_status() const override {
    std::lock_guard lock(mutex_);
    return exit_;
  }
  bool wait_for_exit(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return exit_.has_value(); });
  }

  void emit_line(OutputStream stream, std::string_view line) {
    if (options_.on_line) options_.on_line(stream, line);
  }
  bool exit(ExitStatus status) {
    {
      std::lock_guard lock(mutex_);
      if (exiting_) return false;
      exiting_ = true;
    }
    if (options_.on_exit) options_.on_exit(status);
    std::lock_guard lock(mutex_);
    exit_ = status;
    cv_.notify_all();
    return true;
  }
  void fill(Record* record) const {
    std::lock_guard lock(mutex_);
    record->signals = signals_;
    record->stops = stops_;
  }
  const SpawnOptions& options() const { return options_; }

 private:
  const int pid_;
  const SpawnOptions options_;
  const std::shared_ptr<std::atomic<bool>> exit_on_stop_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<int> signals_;                      // GUARDED_BY(mutex_)
  std::vector<std::chrono::milliseconds> stops_;  // GUARDED_BY(mutex_)
  bool exiting_ = false;                          // GUARDED_BY(mutex_)
  std::optional<ExitStatus> exit_;                // GUARDED_BY(mutex_)
};

cohort::Result<std::shared_ptr<ProcessHandle>> FakeProcessLauncher::spawn(SpawnOptions options) {
  std::lock_guard lock(mutex_);
  if (next_failure_) {
    cohort::Status status = *next_failure_;
    next_failure_.reset();
    return status;
  }
  auto process = std::make_shared<FakeProcess>(next_pid_++, std::move(options), exit_on_stop_);
  processes_.push_back(process);
  return std::shared_ptr<ProcessHandle>(process);
}

void FakeProcessLauncher::fail_next_spawn(cohort::Status status) {
  std::lock_guard lock(mutex_);
  next_failure_ = std::move(status);
}

void FakeProcessLauncher::set_exit_on_stop(bool exit_on_stop) {
  exit_on_stop_->store(exit_on_stop);
}

size_t FakeProcessLauncher::spawn_count() const {
  std::lock_guard lock(mutex_);
  return processes_.size();
}

FakeProcessLauncher::Record FakeProcessLauncher::record(size_t index) const {
  std::shared_ptr<FakeProcess> process;
  Record record;
  {
    std::lock_guard lock(mutex_);
    COHORT_CHECK(index < processes_.size());
    process = processes_[index];
  }
  record.options = process->options();
  record.pid = process->pid();
  process->fill(&record);
  return record;
}

std::shared_ptr<ProcessHandle> FakeProcessLauncher::handle(size_t index) const {
  std::lock_guard lock(mutex_);
  COHORT_CHECK(index < processes_.size());
  return processes_[index];
}

void FakeProcessLauncher::emit_line(size_t index, OutputStream stream, std::string_view line) {
  std::shared_ptr<FakeProcess> process;
  {
    std::lock_guard lock(mutex_);
    COHORT_CHECK(index < processes_.size());
    process = processes_[index];
  }
  process->emit_line(stream, line);
}

bool FakeProcessLauncher::exit(size_t index, ExitStatus status) {
  std::shared_ptr<FakeProcess> process;
  {
    std::lock_guard lock(mutex_);
    COHORT_CHECK(index < processes_.size());
    process = processes_[index];
  }
  return process->exit(status);
}

}  // namespace cohort::agent
