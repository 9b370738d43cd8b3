// Following a job from a client: its log lines as they arrive and its end.
// Used by `cohort submit --wait`, `cohort logs --follow` and `cohort run`.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>

#include "base/status.h"
#include "protocol/client.h"

namespace cohort::protocol {

struct WatchOptions {
  int rank = -1;     // -1: every rank
  int attempt = -1;  // -1: every attempt
  bool print_logs = true;
  bool follow = true;  // false: print what is there and return
  int tail = 0;        // > 0: start from the newest `tail` lines
  // LogReply::note (lines only on the nodes, and where); default: not shown.
  std::function<void(const std::string&)> on_note;
  std::chrono::milliseconds poll{200};
  std::chrono::milliseconds request_timeout{5000};
  // Set (from a signal handler) to ask for the job's cancellation; the watch
  // then carries on until the job has stopped.
  const std::atomic<bool>* interrupt = nullptr;
  // With `interrupt`: return the job's current record at once instead of
  // cancelling it (`cohort submit --wait` detaches; the job runs on).
  bool detach_on_interrupt = false;
  std::function<void(const LogLine&)> on_line;  // default: "[rank R] text" on stdout
  bool raw = false;  // the default on_line writes control characters as they are
  std::function<void()> on_poll;                 // after each poll (a progress display)
};

// Returns the job's final record (or its current one when !follow).
// kUnavailable when the coordinator stops answering.
Result<JobInfo> watch_job(Client& client, const std::string& job_id, const WatchOptions& options);

// "[rank 3] text", the prefix every log line carries on a terminal. Unless
// `raw`, control characters other than tab (C0, DEL, and C1 as UTF-8) are
// written as \xHH, so a job's output cannot drive the reader's terminal
// (escape sequences, cursor moves, a rewritten title).
std::string format_log_line(const LogLine& line, bool raw = false);
// The escaping of format_log_line alone.
std::string escape_control_characters(const std::string& text);

}  // namespace cohort::protocol
