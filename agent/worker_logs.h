// WorkerLogWriter: one attempt's worker output on disk and in memory.
//
// Each line goes to <output_dir>/logs/attempt-<A>/rank-<R>.log prefixed with
// "[rank R] " (so concatenated or grepped logs still say who spoke) and is
// flushed at once: a worker killed a moment later must not take its last
// lines with it. The last `keep_lines` lines per rank (their first 4 KiB)
// stay in memory for the root-cause report of a failed attempt.
#pragma once

#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace cohort::agent {

// Thread-safe: lines of several ranks may arrive from several threads.
class WorkerLogWriter {
 public:
  // Creates <output_dir>/logs/attempt-<attempt>/ (and its parents). Errors
  // name the directory that could not be created.
  static cohort::Result<std::unique_ptr<WorkerLogWriter>> open(const std::string& output_dir,
                                                               int attempt, size_t keep_lines = 50);
  ~WorkerLogWriter();
  WorkerLogWriter(const WorkerLogWriter&) = delete;
  WorkerLogWriter& operator=(const WorkerLogWriter&) = delete;

  // Appends one line (without its newline) to rank's file, opening it on
  // first use. The line is kept in memory even when the disk write fails.
  cohort::Status write_line(int rank, std::string_view line);
  // The last min(n, keep_lines) lines of `rank`, oldest first, unprefixed.
  std::vector<std::string> last_lines(int rank, size_t n) const;

  std::string path_for(int rank) const;  // where rank's lines go
  const std::string& directory() const { return directory_; }

 private:
  WorkerLogWriter(std::string directory, size_t keep_lines)
      : directory_(std::move(directory)), keep_lines_(keep_lines) {}

  struct RankLog {
    FILE* file = nullptr;
    std::deque<std::string> recent;
  };

  const std::string directory_;
  const size_t keep_lines_;
  mutable std::mutex mutex_;
  std::map<int, RankLog> ranks_;  // GUARDED_BY(mutex_)
};

}  // namespace cohort::agent
