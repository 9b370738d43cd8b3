// ExitStatus: how a worker ended, in the words root-cause reports use.
#include <sys/wait.h>

#include <cstring>

#include <fmt/format.h>

#include "agent/process_launcher.h"

namespace cohort::agent {

const char* to_string(OutputStream stream) {
  return stream == OutputStream::kStdout ? "stdout" : "stderr";
}

ExitStatus ExitStatus::from_wait_status(int wait_status) {
  if (WIFSIGNALED(wait_status)) return killed(WTERMSIG(wait_status));
  return exited(WEXITSTATUS(wait_status));
}

std::string ExitStatus::signal_name() const {
  if (signal == 0) return "";
  const char* abbrev = sigabbrev_np(signal);  // "KILL", or null for unnamed (real-time) signals
  return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("SIG{}", signal);
}

std::string ExitStatus::describe() const {
  if (signal != 0) return fmt::format("signal {} ({})", signal, signal_name());
  return fmt::format("exit code {}", exit_code);
}

}  // namespace cohort::agent
