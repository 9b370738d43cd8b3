// LogBuffer: per-job bounded line history.
#include "coordinator/log_buffer.h"

#include <algorithm>

namespace cohort::coordinator {

namespace {
// A reply stays well under the message cap; the client asks again for more.
constexpr size_t kMaxReadBytes = 2u << 20;
}  // namespace

void LogBuffer::pop_oldest(JobLog& log) {
  size_t c = cost(log.lines.front());
  log.bytes -= c;
  total_bytes_ -= c;
  if (log.lines.front().seq > log.saved_seq) unsaved_bytes_ -= c;
  log.lines.pop_front();
}

void LogBuffer::append(const std::string& job_id, std::vector<protocol::LogLine> lines) {
  JobLog& log = logs_[job_id];
  for (auto& line : lines) {
    if (line.text.size() > protocol::kMaxLogLineBytes) {
      size_t was = line.text.size();
      line.text.resize(protocol::kMaxLogLineBytes);
      line.text += "… [line cut: " + std::to_string(was) + " bytes]";
    }
    line.seq = log.next_seq++;
    size_t c = cost(line);
    log.bytes += c;
    total_bytes_ += c;
    unsaved_bytes_ += c;
    log.lines.push_back(std::move(line));
  }
  changed_.insert(job_id);
  while (!log.lines.empty() && log.bytes > max_job_bytes_) pop_oldest(log);
  while (total_bytes_ > max_total_bytes_) {
    const std::string* largest = nullptr;
    for (auto& [id, l] : logs_) {
      if (!l.lines.empty() && (!largest || l.bytes > logs_.at(*largest).bytes)) largest = &id;
    }
    if (!largest) break;
    pop_oldest(logs_.at(*largest));
    changed_.insert(*largest);
  }
}

void LogBuffer::restore(const std::string& job_id, std::vector<protocol::LogLine> lines) {
  if (lines.empty()) return;
  JobLog& log = logs_[job_id];
  for (auto& line : lines) {
    if (!log.lines.empty() && line.seq <= log.lines.back().seq) continue;  // out of order: not ours
    log.next_seq = line.seq + 1;
    log.saved_seq = line.seq;
    size_t c = cost(line);
    log.bytes += c;
    total_bytes_ += c;
    log.lines.push_back(std::move(line));
  }
  // The caps may be smaller than the run that saved them.
  if (log.bytes > max_job_bytes_) changed_.insert(job_id);
  while (!log.lines.empty() && log.bytes > max_job_bytes_) pop_oldest(log);
}

uint64_t LogBuffer::lines_received(const std::string& job_id) const {
  auto it = logs_.find(job_id);
  return it == logs_.end() ? 0 : it->second.next_seq - 1;
}

uint64_t LogBuffer::lines_dropped(const std::string& job_id) const {
  auto it = logs_.find(job_id);
  if (it == logs_.end()) return 0;
  uint64_t first = it->second.lines.empty() ? it->second.next_seq : it->second.lines.front().seq;
  return first - 1;
}

std::vector<LogBuffer::Changes> LogBuffer::take_changes() {
  std::vector<Changes> out;
  for (const auto& id : changed_) {
    auto it = logs_.find(id);
    if (it == logs_.end()) continue;
    JobLog& log = it->second;
    Changes c{id, {}, log.lines.empty() ? log.next_seq : log.lines.front().seq};
    auto start = std::upper_bound(log.lines.begin(), log.lines.end(), log.saved_seq,
                                  [](uint64_t seq, const protocol::LogLine& line) { return seq < line.seq; });
    c.lines.assign(start, log.lines.end());
    log.saved_seq = log.next_seq - 1;
    out.push_back(std::move(c));
  }
  changed_.clear();
  unsaved_bytes_ = 0;
  return out;
}

void LogBuffer::forget(const std::string& job_id) {
  auto it = logs_.find(job_id);
  if (it == logs_.end()) return;
  total_bytes_ -= it->second.bytes;
  for (const auto& line : it->second.lines) {
    if (line.seq > it->second.saved_seq) unsaved_bytes_ -= cost(line);
  }
  changed_.erase(job_id);
  logs_.erase(it);
}

size_t LogBuffer::job_bytes(const std::string& job_id) const {
  auto it = logs_.find(job_id);
  return it == logs_.end() ? 0 : it->second.bytes;
}

std::vector<protocol::LogLine> LogBuffer::read(const protocol::LogQuery& query,
                                               uint64_t* last_seq) const {
  std::vector<protocol::LogLine> out;
  *last_seq = query.after_seq;
  auto it = logs_.find(query.job_id);
  if (it == logs_.end()) return out;
  const auto& lines = it->second.lines;
  // Lines are in seq order: jump to the first one after `after_seq`.
  auto start = std::upper_bound(
      lines.begin(), lines.end(), query.after_seq,
      [](uint64_t seq, const protocol::LogLine& line) { return seq < line.seq; });
  size_t limit = query.max_lines > 0 ? size_t(query.max_lines) : lines.size();
  size_t bytes = 0;
  for (auto l = start; l != lines.end() && out.size() < limit && bytes < kMaxReadBytes; ++l) {
    *last_seq = l->seq;
    if (query.rank >= 0 && l->rank != query.rank) continue;
    if (query.attempt >= 0 && l->attempt != query.attempt) continue;
    bytes += l->text.size() + 32;
    out.push_back(*l);
  }
  return out;
}

std::vector<protocol::LogLine> LogBuffer::newest(const protocol::LogQuery& query, size_t n,
                                                 uint64_t* last_seq) const {
  std::vector<protocol::LogLine> out;
  *last_seq = query.after_seq;
  auto it = logs_.find(query.job_id);
  if (it == logs_.end() || it->second.lines.empty()) return out;
  const auto& lines = it->second.lines;
  *last_seq = std::max(query.after_seq, lines.back().seq);
  size_t bytes = 0;
  for (auto l = lines.rbegin(); l != lines.rend() && out.size() < n && l->seq > query.after_seq &&
                                bytes < kMaxReadBytes;
       ++l) {
    if (query.rank >= 0 && l->rank != query.rank) continue;
    if (query.attempt >= 0 && l->attempt != query.attempt) continue;
    bytes += l->text.size() + 32;
    out.push_back(*l);
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> LogBuffer::tail(const std::string& job_id, int attempt, int rank,
                                         size_t n) const {
  std::vector<std::string> out;
  auto it = logs_.find(job_id);
  if (it == logs_.end()) return out;
  for (auto l = it->second.lines.rbegin(); l != it->second.lines.rend() && out.size() < n; ++l) {
    if (l->attempt == attempt && l->rank == rank) out.push_back(l->text);
  }
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace cohort::coordinator
