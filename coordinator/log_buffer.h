// LogBuffer: the recent worker output of each job, as agents forward it, for
// `cohort logs` (with --rank, --attempt and --follow by sequence number).
//
// Bounded in bytes, per job and in total (the oldest lines go first; when
// the total is reached, lines of the job holding the most go first), and
// lines longer than kMaxLogLineBytes are cut, so no log flood grows the
// coordinator and one huge line cannot make `cohort logs` replies exceed the
// transport cap. The complete logs stay in the per-rank files under the
// job's output_dir on each node.
//
// Durable through the state database: take_changes() hands over the lines
// not saved yet and where each job's kept lines now begin (the coordinator
// writes them once a second, state_db.h), and restore() puts them back after
// a restart with their sequence numbers, so `cohort logs --follow` carries
// on where it was.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
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
  // Lines of one job from the state database, seq set, oldest first; the
  // job's numbering continues after the last.
  void restore(const std::string& job_id, std::vector<protocol::LogLine> lines);
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
  // Lines a job has been sent in all (its numbering), and how many of the
  // oldest were dropped for the byte caps.
  uint64_t lines_received(const std::string& job_id) const;
  uint64_t lines_dropped(const std::string& job_id) const;

  // What changed since the last call, per job: the lines not handed over
  // yet, and the seq of its oldest kept line (older ones can go).
  struct Changes {
    std::string job_id;
    std::vector<protocol::LogLine> lines;
    uint64_t first_kept = 1;
  };
  std::vector<Changes> take_changes();
  size_t unsaved_bytes() const { return unsaved_bytes_; }

 private:
  struct JobLog {
    uint64_t next_seq = 1;
    uint64_t saved_seq = 0;  // lines up to here were handed to take_changes
    size_t bytes = 0;
    std::deque<protocol::LogLine> lines;
  };
  static size_t cost(const protocol::LogLine& line) { return line.text.size() + 48; }
  void pop_oldest(JobLog& log);
  size_t max_job_bytes_;
  size_t max_total_bytes_;
  size_t total_bytes_ = 0;
  size_t unsaved_bytes_ = 0;
  std::map<std::string, JobLog> logs_;
  std::set<std::string> changed_;  // jobs with lines added or dropped since take_changes
};

}  // namespace cohort::coordinator
