// LogBuffer: the recent worker output of each job, as agents forward it, for
// `cohort logs` (with --rank, --attempt and --follow by sequence number).
//
// Bounded per job (the oldest lines go first); the complete logs stay in the
// per-rank files under the job's output_dir on each node. In memory only: a
// restarted coordinator serves the lines that arrive after it started.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "protocol/messages.h"

namespace cohort::coordinator {

class LogBuffer {
 public:
  explicit LogBuffer(size_t max_lines_per_job = 200000) : max_lines_(max_lines_per_job) {}

  void append(const std::string& job_id, std::vector<protocol::LogLine> lines);
  // Lines with seq > after_seq, filtered; *last_seq is where to resume.
  std::vector<protocol::LogLine> read(const protocol::LogQuery& query, uint64_t* last_seq) const;
  // The last `n` lines of one rank in one attempt (root-cause reports).
  std::vector<std::string> tail(const std::string& job_id, int attempt, int rank, size_t n) const;

 private:
  struct JobLog {
    uint64_t next_seq = 1;
    std::deque<protocol::LogLine> lines;
  };
  size_t max_lines_;
  std::map<std::string, JobLog> logs_;
};

}  // namespace cohort::coordinator
