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

// fork + exec on Linux. Workers get PR_SET_PDEATHSIG(SIGKILL), so they die
// with the agent even on `kill -9`; fork happens on the launcher's own
// long-lived thread because the kernel sends that signal when the *thread*
// that forked exits. (Processes a worker starts itself do not inherit it; a
// clean agent shutdown still reaches them by destroying the launcher, which
// SIGKILLs every group it started and reaps the workers.)
std::unique_ptr<ProcessLauncher> make_posix_launcher();

}  // namespace cohort::agent
