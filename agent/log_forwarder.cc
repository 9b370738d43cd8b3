// LogForwarder: per-job token buckets, capped queues and gap reports.
#include "agent/log_forwarder.h"

#include <algorithm>

#include <fmt/format.h>

namespace cohort::agent {
namespace {

std::string size_text(uint64_t bytes) {
  if (bytes >= (1u << 20)) return fmt::format("{:.1f} MiB", double(bytes) / (1 << 20));
  if (bytes >= (1u << 10)) return fmt::format("{:.1f} KiB", double(bytes) / (1 << 10));
  return fmt::format("{} bytes", bytes);
}

// Gap reports of a job whose queue has drained come at most this often per
// job while its flood lasts.
constexpr auto kGapReportEvery = std::chrono::seconds(1);

}  // namespace

std::string describe_log_gap(int attempt, int rank, uint64_t lines, uint64_t bytes,
                             const LogForwardingLimits& limits) {
  return fmt::format(
      "cohort: {} line{} ({}) of rank {} were not forwarded here (this job's output passed the "
      "agent's "
      "forwarding limit of {}/s, or its buffer of {} filled while the coordinator was away); "
      "logs/attempt-{}/rank-{}.log under the job's output_dir on this rank's node holds every line",
      lines, lines == 1 ? "" : "s", size_text(bytes), rank, size_text(limits.rate_bytes_per_s),
      size_text(limits.job_buffer_bytes), attempt, rank);
}

LogForwarder::LogForwarder(const Clock& clock, LogForwardingLimits limits)
    : clock_(clock), limits_(limits) {}

void LogForwarder::refill(JobQueue& q, Clock::TimePoint now) const {
  double seconds = std::chrono::duration<double>(now - q.refilled).count();
  if (seconds > 0) {
    q.tokens = std::min(double(limits_.burst_bytes),
                        q.tokens + seconds * double(limits_.rate_bytes_per_s));
  }
  q.refilled = now;
}

void LogForwarder::push(JobQueue& q, protocol::LogLine line) {
  size_t c = cost(line);
  q.bytes += c;
  total_bytes_ += c;
  q.lines.push_back(std::move(line));
}

void LogForwarder::report_gaps(JobQueue& q, Clock::TimePoint now) {
  for (const auto& [key, gap] : q.gaps) {
    push(q,
         protocol::LogLine{0, key.first, key.second,
                           describe_log_gap(key.first, key.second, gap.lines, gap.bytes, limits_)});
  }
  q.gaps.clear();
  q.last_gap_report = now;
}

void LogForwarder::add(const std::string& job, protocol::LogLine line) {
  size_t original = line.text.size();
  if (original > limits_.line_bytes) {
    line.text.resize(limits_.line_bytes);
    line.text += fmt::format(" [cohort: line cut here, {} more in the rank's log file]",
                             size_text(original - limits_.line_bytes));
  }
  auto now = clock_.now();
  std::lock_guard lock(mutex_);
  auto [it, fresh] = jobs_.try_emplace(job);
  JobQueue& q = it->second;
  if (fresh) {
    q.tokens = double(limits_.burst_bytes);
    q.refilled = now;
  }
  refill(q, now);
  size_t c = cost(line);
  bool room =
      q.bytes + c <= limits_.job_buffer_bytes && total_bytes_ + c <= limits_.total_buffer_bytes;
  // Hysteresis: a job that started dropping resumes once it has half its
  // burst and half its buffer again, so a flood makes few, long gaps.
  if (q.dropping && q.tokens >= double(limits_.burst_bytes) / 2 &&
      q.bytes <= limits_.job_buffer_bytes / 2 && room) {
    q.dropping = false;
  }
  if (!q.dropping && (q.tokens < double(c) || !room)) q.dropping = true;
  if (q.dropping) {
    Gap& gap = q.gaps[{line.attempt, line.rank}];
    gap.lines += 1;
    gap.bytes += original;
    ++dropped_lines_;
    return;
  }
  q.tokens -= double(c);
  if (!q.gaps.empty()) report_gaps(q, now);  // the gap comes before the line that follows it
  push(q, std::move(line));
}

std::optional<protocol::LogBatch> LogForwarder::take_batch(const std::string& job) {
  auto now = clock_.now();
  std::lock_guard lock(mutex_);
  // Idle jobs (nothing waiting, bucket full) are forgotten.
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    JobQueue& q = it->second;
    refill(q, now);
    bool idle = q.lines.empty() && q.gaps.empty() && q.tokens >= double(limits_.burst_bytes);
    it = idle ? jobs_.erase(it) : std::next(it);
  }
  if (jobs_.empty()) return std::nullopt;
  // Round robin: the first job after the last one served.
  auto start = jobs_.upper_bound(next_job_);
  for (size_t i = 0; i < jobs_.size(); ++i, ++start) {
    if (start == jobs_.end()) start = jobs_.begin();
    if (!job.empty() && start->first != job) continue;
    JobQueue& q = start->second;
    if (q.lines.empty() && !q.gaps.empty() && now - q.last_gap_report >= kGapReportEvery)
      report_gaps(q, now);
    if (q.lines.empty()) continue;
    protocol::LogBatch batch{start->first, {}};
    size_t bytes = 0;
    while (!q.lines.empty() &&
           (batch.lines.empty() || bytes + cost(q.lines.front()) <= limits_.batch_bytes)) {
      size_t c = cost(q.lines.front());
      bytes += c;
      q.bytes -= c;
      total_bytes_ -= c;
      batch.lines.push_back(std::move(q.lines.front()));
      q.lines.pop_front();
    }
    if (job.empty()) next_job_ = start->first;
    return batch;
  }
  return std::nullopt;
}

void LogForwarder::lost(const protocol::LogBatch& batch) {
  auto now = clock_.now();
  std::lock_guard lock(mutex_);
  auto [it, fresh] = jobs_.try_emplace(batch.job_id);
  if (fresh) {
    it->second.tokens = double(limits_.burst_bytes);
    it->second.refilled = now;
  }
  for (const auto& line : batch.lines) {
    Gap& gap = it->second.gaps[{line.attempt, line.rank}];
    gap.lines += 1;
    gap.bytes += line.text.size();
    ++dropped_lines_;
  }
}

bool LogForwarder::has_waiting(const std::string& job) const {
  std::lock_guard lock(mutex_);
  auto it = jobs_.find(job);
  return it != jobs_.end() && (!it->second.lines.empty() || !it->second.gaps.empty());
}

size_t LogForwarder::buffered_bytes() const {
  std::lock_guard lock(mutex_);
  return total_bytes_;
}

uint64_t LogForwarder::dropped_lines() const {
  std::lock_guard lock(mutex_);
  return dropped_lines_;
}

}  // namespace cohort::agent
