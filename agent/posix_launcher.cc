// The POSIX launcher: one event thread forks workers (each under its keeper,
// see posix_fork_exec.h), reads their output and exit reports, and reaps the
// keepers.
//
// The keeper holds the worker's tree; the launcher holds the keeper's
// lifeline, which dies with the agent whatever kills it. Under cgroup
// containment the worker's cgroup is killed whenever the keeper is released
// (and removed once empty), so what the keeper missed goes too.
// Exits are noticed through pidfds (poll-able, no SIGCHLD handler to fight
// over with the rest of the daemon), or by polling waitpid every 20 ms where
// pidfd_open is not available.
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <list>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "agent/cgroup_containment.h"
#include "agent/posix_fork_exec.h"
#include "agent/process_launcher.h"

namespace cohort::agent {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kWaitpidPollInterval = std::chrono::milliseconds(20);
// How long an emptied worker's cgroup may take to lose its last process
// before the launcher stops trying to remove it (the instance's clean-up at
// shutdown, or the next agent's, still does).
constexpr auto kCgroupRemovalPatience = std::chrono::seconds(10);

class EventLoop;

// The stream buffers and callbacks are touched only by the event thread; the
// rest is guarded by mutex_.
class PosixProcess final : public ProcessHandle {
 public:
  PosixProcess(std::shared_ptr<EventLoop> loop, const StartedProcess& started, SpawnOptions options,
               const CgroupContainment* containment, std::string cgroup)
      : loop_(std::move(loop)), pid_(started.pid), keeper_(started.keeper),
        report_fd_(started.report_fd), lifeline_fd_(started.lifeline_fd), options_(std::move(options)),
        containment_(containment), cgroup_(std::move(cgroup)) {
    streams_[0] = {started.stdout_fd, OutputStream::kStdout, {}};
    streams_[1] = {started.stderr_fd, OutputStream::kStderr, {}};
    // Through syscall(): glibc 2.36's <sys/pidfd.h> lacks extern "C" for C++.
    // -1 on kernels before 5.3: waitpid polling instead.
    pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, keeper_, 0));
  }
  ~PosixProcess() override {
    for (auto& s : streams_) close_stream(s, /*deliver_partial=*/false);
    for (int* fd : {&pidfd_, &report_fd_, &lifeline_fd_}) close_fd(*fd);
  }

  int pid() const override { return pid_; }
  cohort::Status signal_group(int sig) override;
  void stop(std::chrono::milliseconds grace) override;
  std::optional<ExitStatus> exit_status() const override {
    std::lock_guard lock(mutex_);
    return exit_;
  }
  bool wait_for_exit(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mutex_);
    return exited_cv_.wait_for(lock, timeout, [&] { return exit_.has_value(); });
  }

 private:
  friend class EventLoop;
  struct Stream {
    int fd = -1;
    OutputStream which;
    std::string partial;  // bytes after the last newline
  };

  // Reads what is there; at end of output closes the stream (flushing a
  // last line without newline).
  void read_stream(Stream& s);
  void deliver(Stream& s, std::string_view line) {
    if (options_.on_line) options_.on_line(s.which, line);
  }
  void close_stream(Stream& s, bool deliver_partial) {
    if (s.fd < 0) return;
    close(s.fd);
    s.fd = -1;
    if (deliver_partial && !s.partial.empty()) deliver(s, s.partial);
    s.partial.clear();
  }
  static void close_fd(int& fd) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
  // waitpid on the keeper without blocking; true when it has been reaped now.
  bool try_reap(ExitStatus* status);
  // Reads the keeper's records; delivers the worker's exit when it came.
  void read_reports();
  // Delivers the worker's exit (once): its last output, then on_exit.
  void finish(const ExitStatus& status, bool call_back);
  // The keeper kills what is left of the tree and exits; the cgroup, if
  // any, is killed whole.
  void release_keeper() {
    close_fd(lifeline_fd_);
    if (containment_ && !cgroup_removed_) (void)containment_->kill(cgroup_);
  }
  // Event thread: removes the emptied cgroup; true once it is gone (or
  // there is none, or removing it was given up).
  bool cgroup_gone(Clock::time_point now);

  std::shared_ptr<EventLoop> loop_;
  const pid_t pid_;     // the worker, also its process group id
  const pid_t keeper_;  // its keeper: the launcher's child
  int report_fd_ = -1;
  int lifeline_fd_ = -1;
  SpawnOptions options_;
  Stream streams_[2];
  int pidfd_ = -1;
  const CgroupContainment* containment_;  // null: no cgroup; owned by the loop
  const std::string cgroup_;
  bool cgroup_removed_ = false;              // event thread only
  std::optional<Clock::time_point> removal_since_;  // event thread only
  bool reaped_ = false;          // event thread only: the keeper is reaped
  bool exit_delivered_ = false;  // event thread only

  mutable std::mutex mutex_;
  std::condition_variable exited_cv_;
  std::optional<ExitStatus> exit_;            // GUARDED_BY(mutex_)
  std::optional<Clock::time_point> kill_at_;  // GUARDED_BY(mutex_)
  bool group_gone_ = false;                   // GUARDED_BY(mutex_)
};

class EventLoop : public std::enable_shared_from_this<EventLoop> {
 public:
  explicit EventLoop(std::unique_ptr<CgroupContainment> containment)
      : wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)), containment_(std::move(containment)) {}
  ~EventLoop() { close(wake_fd_); }

  void start() {
    thread_ = std::thread([this] { run(); });
  }
  cohort::Result<std::shared_ptr<ProcessHandle>> spawn(SpawnOptions options);
  void wake() {
    uint64_t one = 1;
    ssize_t ignored = write(wake_fd_, &one, sizeof one);
    (void)ignored;
  }
  // SIGKILLs every group, reaps every worker (without callbacks: the owner is
  // going away) and joins the thread.
  void shutdown() {
    {
      std::lock_guard lock(mutex_);
      shutting_down_ = true;
    }
    wake();
    if (thread_.joinable()) thread_.join();
  }

 private:
  struct SpawnRequest {
    SpawnOptions options;
    std::promise<cohort::Result<std::shared_ptr<ProcessHandle>>> result;
  };

  void run();
  cohort::Result<std::shared_ptr<ProcessHandle>> spawn_here(SpawnOptions options);
  int poll_timeout_ms(Clock::time_point now) const;
  void service(PosixProcess& p, Clock::time_point now);
  void kill_everything();

  const int wake_fd_;
  std::thread thread_;
  std::unique_ptr<CgroupContainment> containment_;      // event thread only; null: subreaper only
  std::list<std::shared_ptr<PosixProcess>> processes_;  // event thread only

  std::mutex mutex_;
  std::deque<SpawnRequest> requests_;  // GUARDED_BY(mutex_)
  bool shutting_down_ = false;         // GUARDED_BY(mutex_)
};

cohort::Status PosixProcess::signal_group(int sig) {
  std::lock_guard lock(mutex_);
  if (group_gone_) return cohort::Status::ok();
  // While the launcher tracks the group its id cannot be reused: either the
  // leader is unreaped or a member is still alive (checked after reaping).
  if (kill(-pid_, sig) != 0 && errno != ESRCH) {
    return errno_error("signalling process group " + std::to_string(pid_));
  }
  return cohort::Status::ok();
}

void PosixProcess::stop(std::chrono::milliseconds grace) {
  {
    std::lock_guard lock(mutex_);
    if (group_gone_) return;
    kill(-pid_, SIGTERM);
    auto at = Clock::now() + grace;
    if (!kill_at_ || at < *kill_at_) kill_at_ = at;
  }
  loop_->wake();
}

void PosixProcess::read_stream(Stream& s) {
  char buffer[64 * 1024];
  while (s.fd >= 0) {
    ssize_t n = read(s.fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {  // end of output, or an error that ends it just the same
      close_stream(s, /*deliver_partial=*/true);
      return;
    }
    s.partial.append(buffer, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = s.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
      deliver(s, std::string_view(s.partial).substr(start, nl - start));
    }
    s.partial.erase(0, start);
    while (s.partial.size() >= kMaxLineBytes) {  // a runaway line: hand it over in pieces
      deliver(s, std::string_view(s.partial).substr(0, kMaxLineBytes));
      s.partial.erase(0, kMaxLineBytes);
    }
  }
}

void PosixProcess::read_reports() {
  while (report_fd_ >= 0) {
    KeeperRecord record;
    ssize_t n = read(report_fd_, &record, sizeof record);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n != static_cast<ssize_t>(sizeof record)) {
      close_fd(report_fd_);
      return;
    }
    if (record.kind != KeeperRecord::kExited || exit_delivered_) continue;
    finish(ExitStatus::from_wait_status(record.value), /*call_back=*/true);
    // A plain exit: whatever the worker left behind goes now. During a stop
    // it gets the rest of the grace, then the SIGKILL releases the keeper.
    std::lock_guard lock(mutex_);
    if (!kill_at_) release_keeper();
  }
}

bool PosixProcess::try_reap(ExitStatus* status) {
  int wait_status = 0;
  pid_t r = waitpid(keeper_, &wait_status, WNOHANG);
  if (r == 0 || (r < 0 && errno == EINTR)) return false;
  if (r < 0) {
    // ECHILD: someone else reaped it (SIGCHLD set to SIG_IGN, or a stray
    // waitpid(-1)); the real status is lost.
    spdlog::warn("worker {} was reaped elsewhere ({}); reporting it as killed", pid_,
                 strerror(errno));
    *status = ExitStatus::killed(SIGKILL);
    return true;
  }
  *status = ExitStatus::from_wait_status(wait_status);
  return true;
}

void PosixProcess::finish(const ExitStatus& status, bool call_back) {
  if (exit_delivered_) return;
  exit_delivered_ = true;
  // The worker's descriptors closed as it exited, so everything it wrote is
  // in the pipes now: deliver it before the exit.
  for (auto& s : streams_) {
    if (call_back) {
      read_stream(s);
    } else {
      close_stream(s, /*deliver_partial=*/false);
    }
  }
  if (call_back && options_.on_exit) options_.on_exit(status);
  std::lock_guard lock(mutex_);
  exit_ = status;
  // Children left in the group keep it (and its id) alive; without them the
  // pending SIGKILL has nothing to do.
  if (kill(-pid_, 0) != 0 && errno == ESRCH) {
    group_gone_ = true;
    kill_at_.reset();
  }
  exited_cv_.notify_all();
}

bool PosixProcess::cgroup_gone(Clock::time_point now) {
  if (!containment_ || cgroup_removed_) return true;
  if (containment_->remove(cgroup_)) {
    cgroup_removed_ = true;
    removal_since_.reset();
    return true;
  }
  // Killed processes take a moment to leave; anything new is killed again.
  (void)containment_->kill(cgroup_);
  if (!removal_since_) removal_since_ = now;
  if (now - *removal_since_ < kCgroupRemovalPatience) return false;
  spdlog::warn("worker {}: its cgroup {} still has processes; leaving it to the launcher's clean-up", pid_, cgroup_);
  cgroup_removed_ = true;
  removal_since_.reset();
  return true;
}

cohort::Result<std::shared_ptr<ProcessHandle>> EventLoop::spawn(SpawnOptions options) {
  if (std::this_thread::get_id() == thread_.get_id()) return spawn_here(std::move(options));
  std::future<cohort::Result<std::shared_ptr<ProcessHandle>>> result;
  {
    std::lock_guard lock(mutex_);
    if (shutting_down_) return aborted("the launcher is shutting down");
    requests_.push_back({std::move(options), {}});
    result = requests_.back().result.get_future();
  }
  wake();
  return result.get();
}

cohort::Result<std::shared_ptr<ProcessHandle>> EventLoop::spawn_here(SpawnOptions options) {
  std::optional<WorkerCgroup> cgroup;
  if (containment_) {
    auto created = containment_->create(options.group, options.name);
    if (!created) {
      return created.status().with_context("cannot run '" + (options.argv.empty() ? "" : options.argv[0]) + "'");
    }
    cgroup = *created;
  }
  auto started = fork_exec_worker(options, cgroup ? &*cgroup : nullptr);
  if (cgroup) {
    ::close(cgroup->procs_fd);
    if (!started) (void)containment_->remove(cgroup->path);
  }
  if (!started) return started.status();
  auto process = std::make_shared<PosixProcess>(shared_from_this(), *started, std::move(options),
                                                containment_.get(), cgroup ? cgroup->path : "");
  processes_.push_back(process);
  return std::shared_ptr<ProcessHandle>(process);
}

int EventLoop::poll_timeout_ms(Clock::time_point now) const {
  std::optional<Clock::duration> wait;
  auto consider = [&](Clock::duration d) {
    if (!wait || d < *wait) wait = std::max(d, Clock::duration::zero());
  };
  for (const auto& p : processes_) {
    if ((!p->reaped_ && p->pidfd_ < 0) || p->removal_since_) consider(kWaitpidPollInterval);
    std::lock_guard lock(p->mutex_);
    if (p->kill_at_) consider(*p->kill_at_ - now);
  }
  if (!wait) return -1;
  // Round up so the deadline has passed when poll returns.
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(*wait).count());
}

void EventLoop::service(PosixProcess& p, Clock::time_point now) {
  for (auto& s : p.streams_) p.read_stream(s);
  p.read_reports();
  ExitStatus status;
  if (!p.reaped_ && p.try_reap(&status)) {
    p.reaped_ = true;
    PosixProcess::close_fd(p.pidfd_);
    p.read_reports();  // the keeper reports before it exits
    p.finish(status, /*call_back=*/true);  // its status mirrors the worker's
    PosixProcess::close_fd(p.report_fd_);
    p.release_keeper();
  }
  std::lock_guard lock(p.mutex_);
  if (p.kill_at_ && *p.kill_at_ <= now) {
    kill(-p.pid_, SIGKILL);
    p.release_keeper();  // and everything outside the group, setsid'd ones included
    p.kill_at_.reset();
  }
}

void EventLoop::run() {
  std::vector<pollfd> fds;
  while (true) {
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    for (const auto& p : processes_) {
      if (p->pidfd_ >= 0) fds.push_back({p->pidfd_, POLLIN, 0});
      if (p->report_fd_ >= 0) fds.push_back({p->report_fd_, POLLIN, 0});
      for (const auto& s : p->streams_) {
        if (s.fd >= 0) fds.push_back({s.fd, POLLIN, 0});
      }
    }
    int n = poll(fds.data(), fds.size(), poll_timeout_ms(Clock::now()));
    if (n < 0 && errno != EINTR) spdlog::error("launcher poll: {}", strerror(errno));
    uint64_t drained;
    while (read(wake_fd_, &drained, sizeof drained) > 0) {
    }

    std::deque<SpawnRequest> requests;
    bool shutting_down;
    {
      std::lock_guard lock(mutex_);
      requests.swap(requests_);
      shutting_down = shutting_down_;
    }
    for (auto& request : requests) request.result.set_value(spawn_here(std::move(request.options)));
    if (shutting_down) {
      kill_everything();
      return;
    }
    // Servicing every process each round is simpler than mapping poll
    // results back, and cheap at the tens of workers an agent runs.
    auto now = Clock::now();
    for (auto it = processes_.begin(); it != processes_.end();) {
      PosixProcess& p = **it;
      service(p, now);
      bool done = p.reaped_ && p.streams_[0].fd < 0 && p.streams_[1].fd < 0;
      {
        std::lock_guard lock(p.mutex_);
        done = done && !p.kill_at_;
        if (done) p.group_gone_ = true;  // untracked from here: never signal that id again
      }
      done = done && p.cgroup_gone(now);
      it = done ? processes_.erase(it) : std::next(it);
    }
  }
}

void EventLoop::kill_everything() {
  for (auto& p : processes_) {
    std::lock_guard lock(p->mutex_);
    if (!p->group_gone_) kill(-p->pid_, SIGKILL);
    p->release_keeper();
  }
  for (auto& p : processes_) {
    if (!p->reaped_) {
      int wait_status = 0;
      while (waitpid(p->keeper_, &wait_status, 0) < 0 && errno == EINTR) {
      }
      p->reaped_ = true;
      p->finish(ExitStatus::from_wait_status(wait_status), /*call_back=*/false);
    }
    std::lock_guard lock(p->mutex_);
    p->group_gone_ = true;
    p->kill_at_.reset();
  }
  processes_.clear();
  containment_.reset();  // kills and removes every cgroup of this launcher
}

class PosixLauncher final : public ProcessLauncher {
 public:
  explicit PosixLauncher(std::unique_ptr<CgroupContainment> containment)
      : loop_(std::make_shared<EventLoop>(std::move(containment))) {
    loop_->start();
  }
  ~PosixLauncher() override { loop_->shutdown(); }
  cohort::Result<std::shared_ptr<ProcessHandle>> spawn(SpawnOptions options) override {
    return loop_->spawn(std::move(options));
  }

 private:
  std::shared_ptr<EventLoop> loop_;
};

}  // namespace

const char* to_string(Containment containment) {
  switch (containment) {
    case Containment::kAuto: return "auto";
    case Containment::kCgroup: return "cgroup";
    case Containment::kSubreaper: return "subreaper";
  }
  return "?";
}

cohort::Result<Containment> parse_containment(const std::string& text) {
  for (Containment c : {Containment::kAuto, Containment::kCgroup, Containment::kSubreaper}) {
    if (text == to_string(c)) return c;
  }
  return invalid_argument("containment '" + text + "': give auto, cgroup or subreaper");
}

cohort::Result<std::unique_ptr<ProcessLauncher>> make_posix_launcher(const LauncherOptions& options) {
  std::unique_ptr<CgroupContainment> containment;
  if (options.containment != Containment::kSubreaper) {
    auto opened = CgroupContainment::open({options.cgroup_parent, options.owner, options.use_kill_file});
    if (opened) {
      containment = std::move(*opened);
      spdlog::info("workers are contained in cgroups under {}", containment->dir());
    } else if (options.containment == Containment::kCgroup) {
      return opened.status().with_context("cgroup containment");
    } else {
      spdlog::info("workers are contained by a child subreaper only; no cgroup: {}", opened.status().message());
    }
  }
  return std::unique_ptr<ProcessLauncher>(std::make_unique<PosixLauncher>(std::move(containment)));
}

std::unique_ptr<ProcessLauncher> make_posix_launcher() {
  return std::make_unique<PosixLauncher>(nullptr);
}

}  // namespace cohort::agent
