// LogForwarder: worker output on its way from an agent to the coordinator,
// bounded in memory and in rate so that no job's output can crowd out the
// control messages (heartbeats, exits) that share the link, or its
// neighbours' lines.
//
// Every line still goes to the per-rank file on the node first (worker_logs.h);
// what is forwarded is a rate-limited copy:
//   - a line longer than line_bytes is cut, with a note of what was cut;
//   - each job has a token bucket (rate_bytes_per_s, burst_bytes); a job
//     over its rate has its lines dropped until the bucket is half full
//     again, so gaps come in few, long episodes;
//   - what waits to be sent is capped per job and for all jobs together;
//   - a dropped line is never dropped silently: the next line forwarded for
//     that rank (or, once the job's queue has drained, a line of its own) is
//     a gap report, "cohort: N lines (B bytes) of rank R were not forwarded
//     here …", naming the rank's file on the node, which holds them all.
//
// The agent takes batches (take_batch) only as the coordinator acknowledges
// earlier ones (agent.cc keeps at most a few in flight), so the transport's
// queue never holds more than a bounded amount of log bytes ahead of a
// heartbeat. Lines waiting while the coordinator is away are sent when it
// answers again, or reported as a gap once the buffer's cap is reached.
//
// Thread-safe: add() is called on the launcher's threads, the rest on the
// agent's loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include "base/clock.h"
#include "protocol/messages.h"

namespace cohort::agent {

struct LogForwardingLimits {
  size_t line_bytes = 16 << 10;          // longer lines are cut
  size_t rate_bytes_per_s = 2 << 20;     // per job, sustained
  size_t burst_bytes = 8 << 20;          // per job, what a burst may send at once
  size_t job_buffer_bytes = 8 << 20;     // per job, waiting to be sent
  size_t total_buffer_bytes = 32 << 20;  // all jobs together
  size_t batch_bytes = 256 << 10;        // one LogBatch message
};

class LogForwarder {
 public:
  explicit LogForwarder(const Clock& clock, LogForwardingLimits limits = {});

  // One line of `job`'s worker output (line.seq unset).
  void add(const std::string& job, protocol::LogLine line);
  // The next batch to send: the next job's waiting lines (round robin), up
  // to batch_bytes, with any gap reports due; only `job`'s when given.
  // nullopt when nothing waits.
  std::optional<protocol::LogBatch> take_batch(const std::string& job = "");
  // A batch that was taken but could not be delivered: its lines count as
  // dropped (reported as a gap like any other).
  void lost(const protocol::LogBatch& batch);
  // True while lines or gap reports of `job` wait to be taken.
  bool has_waiting(const std::string& job) const;

  size_t buffered_bytes() const;
  // Totals since start, for tests and logs.
  uint64_t dropped_lines() const;
  const LogForwardingLimits& limits() const { return limits_; }

  // What a line costs in the buffer (text plus fixed overhead).
  static size_t cost(const protocol::LogLine& line) { return line.text.size() + 64; }

 private:
  struct Gap {
    uint64_t lines = 0;
    uint64_t bytes = 0;
  };
  struct JobQueue {
    std::deque<protocol::LogLine> lines;
    size_t bytes = 0;
    double tokens = 0;
    Clock::TimePoint refilled{};
    bool dropping = false;
    std::map<std::pair<int, int>, Gap> gaps;  // (attempt, rank) -> dropped since the last report
    Clock::TimePoint last_gap_report{};
  };

  void refill(JobQueue& q, Clock::TimePoint now) const;
  // Appends gap reports for every rank with drops (then forgets them).
  void report_gaps(JobQueue& q, Clock::TimePoint now);
  void push(JobQueue& q, protocol::LogLine line);

  const Clock& clock_;
  const LogForwardingLimits limits_;
  mutable std::mutex mutex_;
  std::map<std::string, JobQueue> jobs_;  // GUARDED_BY(mutex_)
  size_t total_bytes_ = 0;                // GUARDED_BY(mutex_)
  uint64_t dropped_lines_ = 0;            // GUARDED_BY(mutex_)
  std::string next_job_;                  // round robin over jobs, GUARDED_BY(mutex_)
};

// The gap report's text (also used by tests to recognise one).
std::string describe_log_gap(int attempt, int rank, uint64_t lines, uint64_t bytes,
                             const LogForwardingLimits& limits);

}  // namespace cohort::agent
