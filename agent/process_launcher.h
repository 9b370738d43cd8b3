// ProcessLauncher: starts worker processes and reports their output and exit.
//
// Each worker runs in its own process group, so stopping it reaches whatever
// it started (data loader processes, a shell's children): stop() sends
// SIGTERM to the group and SIGKILL after the grace period. Output arrives
// line by line; the exit arrives once, as an exit code or a signal.
//
// The agent takes a ProcessLauncher so tests can hand it a
// FakeProcessLauncher (agent/fake_process_launcher.h) and drive exits by hand.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace cohort::agent {

enum class OutputStream { kStdout, kStderr };
const char* to_string(OutputStream stream);

// How a process ended: an exit code, or the signal that killed it.
struct ExitStatus {
  int exit_code = 0;  // meaningful when signal == 0
  int signal = 0;     // the terminating signal, 0 when the process exited

  static ExitStatus exited(int code) { return {code, 0}; }
  static ExitStatus killed(int sig) { return {0, sig}; }
  static ExitStatus from_wait_status(int wait_status);  // from waitpid()

  bool signaled() const { return signal != 0; }
  bool success() const { return signal == 0 && exit_code == 0; }
  // "SIGKILL" (or "SIG42" for one without a name); "" when not signaled.
  std::string signal_name() const;
  // "exit code 3" or "signal 9 (SIGKILL)", for root-cause reports.
  std::string describe() const;
  bool operator==(const ExitStatus&) const = default;
};

// What to run. `env` is the complete environment (see build_worker_env); the
// program is looked up in env's PATH when argv[0] has no slash.
struct SpawnOptions {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::string working_dir;  // empty: the agent's own
  // One call per line, without its newline; a last line without one is
  // delivered at end of output. Lines longer than kMaxLineBytes arrive in pieces.
  std::function<void(OutputStream, std::string_view line)> on_line;
  // Called exactly once, after every line the process itself wrote has been
  // delivered. (Children it left running in the group may deliver more.)
  std::function<void(const ExitStatus&)> on_exit;
  // Under cgroup containment the worker's cgroup is <instance>/<group>/<name>
  // (the supervisor passes the attempt, "job-3-0", and "rank-1").
  std::string group = "workers";
  std::string name = "worker";
};

inline constexpr size_t kMaxLineBytes = 64 * 1024;

// A running (or finished) worker. Thread-safe. Dropping the handle does not
// stop the process; the launcher keeps tracking it.
class ProcessHandle {
 public:
  virtual ~ProcessHandle() = default;
  virtual int pid() const = 0;  // also the process group id
  // Sends `sig` to the whole process group. Not an error once the group is
  // gone (it has nothing left to signal).
  virtual cohort::Status signal_group(int sig) = 0;
  // SIGTERM to the group now, SIGKILL to the group after `grace` if anything
  // in it is still alive (even when the worker itself exited on SIGTERM but
  // left children behind). Returns at once; the exit arrives through on_exit.
  virtual void stop(std::chrono::milliseconds grace) = 0;
  // The exit, once on_exit has been called.
  virtual std::optional<ExitStatus> exit_status() const = 0;
  // Blocks until on_exit has returned or `timeout` passes; true if it has.
  virtual bool wait_for_exit(std::chrono::milliseconds timeout) = 0;
};

// Thread-safe: spawn may be called from any thread, including from inside
// on_line/on_exit. Callbacks of the POSIX launcher run on its one event
// thread, one at a time, so they must be quick, must not wait for another
// process's exit, and must not destroy the launcher.
class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;
  // Starts the process, or fails with an error naming the program and the
  // reason (not found, not executable, bad working_dir): exec failures are
  // reported here, never as a mysterious exit 127.
  virtual cohort::Result<std::shared_ptr<ProcessHandle>> spawn(SpawnOptions options) = 0;
};

// How a launcher keeps a worker's processes from outliving it.
//   kSubreaper: each worker under a keeper process that is its child
//     subreaper and kills the whole tree, setsid'd processes included, when
//     the worker ends or the agent dies (posix_fork_exec.h). What escapes:
//     processes of a keeper that was itself SIGKILLed.
//   kCgroup: that, and each worker in a cgroup v2 of its own, killed whole
//     (cgroup_containment.h); what a dead agent left in its cgroups is killed
//     when the next agent or `cohort run` on the host starts.
//   kAuto: kCgroup where the host delegates a writable cgroup v2, else
//     kSubreaper (the reason is logged).
enum class Containment { kAuto, kCgroup, kSubreaper };
const char* to_string(Containment containment);
Result<Containment> parse_containment(const std::string& text);

struct LauncherOptions {
  Containment containment = Containment::kAuto;
  std::string owner = "agent";  // names the instance's cgroup: cohort-<owner>-<pid>
  std::string cgroup_parent;    // empty: the cgroup this process is in
  bool use_kill_file = true;    // false: freeze and SIGKILL, as before Linux 5.14
};

// fork + exec on Linux. Workers get PR_SET_PDEATHSIG(SIGKILL), so they die
// with the agent even on `kill -9`; fork happens on the launcher's own
// long-lived thread because the kernel sends that signal when the *thread*
// that forked exits. Destroying the launcher SIGKILLs every worker's tree
// (and cgroup) and reaps the workers.
// kCgroup fails where cgroups cannot be used, saying why.
Result<std::unique_ptr<ProcessLauncher>> make_posix_launcher(const LauncherOptions& options);
// Child subreaper containment only (tests and tools).
std::unique_ptr<ProcessLauncher> make_posix_launcher();

}  // namespace cohort::agent
