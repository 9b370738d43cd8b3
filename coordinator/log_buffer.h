// LogBuffer: the recent worker output of each job, as agents forward it, for
// `cohort logs` (with --rank, --attempt and --follow by sequence number).
//
// Bounded in bytes, per job and in total (the oldest lines go first; when
// the total is reached, lines of the job holding the most go first), and
// lines longer than kMaxLogLineBytes are cut, so no log flood grows the
// coordinator and one huge line cannot make `cohort logs` replies exceed the
// transport cap. The complete logs stay in the per-rank files under the
// job's output_dir on each node. In memory only: a restarted coordinator
// serves the lines that arrive after it started.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "protocol/limits.h"
#include "protocol/messages.h"

namespace cohort::coordinator {

class LogBuffer {
 public:
  explicit LogBuffer(size_t max_bytes_per_job = protocol::kMaxLogBytesPerJob,
                     size_t max_bytes_total = protocol::kMaxLogBytesTotal)
      : max_job_bytes_(max_bytes_per_job), max_total_bytes_(max_bytes_total) {}

  void append(const std::string& job_id, std::vector<protocol::LogLine> lines);
  // Drops a job's lines (the job was removed or retired).
  void forget(const std::string& job_id);
  size_t total_bytes() const { return total_bytes_; }
  size_t job_bytes(const std::string& job_id) const;
  // Lines with seq > after_seq, filtered; *last_seq is where to resume.
  std::vector<protocol::LogLine> read(const protocol::LogQuery& query, uint64_t* last_seq) const;
  // The newest `n` lines that pass the query's filters and come after its
  // after_seq, oldest first (the web page's log tail); *last_seq is the
  // job's newest seq, where the tail resumes.
  std::vector<protocol::LogLine> newest(const protocol::LogQuery& query, size_t n, uint64_t* last_seq) const;
  // The last `n` lines of one rank in one attempt (root-cause reports).
  std::vector<std::string> tail(const std::string& job_id, int attempt, int rank, size_t n) const;

 private:
  struct JobLog {
    uint64_t next_seq = 1;
    size_t bytes = 0;
    std::deque<protocol::LogLine> lines;
  };
  static size_t cost(const protocol::LogLine& line) { return line.text.size() + 48; }
  void pop_oldest(JobLog& log);
  size_t max_job_bytes_;
  size_t max_total_bytes_;
  size_t total_bytes_ = 0;
  std::map<std::string, JobLog> logs_;
};

}  // namespace cohort::coordinator
