// WorkerLogWriter: per-rank log files of one attempt, plus a tail in memory.
#include "agent/worker_logs.h"

#include <cerrno>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

namespace cohort::agent {

cohort::Result<std::unique_ptr<WorkerLogWriter>> WorkerLogWriter::open(
    const std::string& output_dir, int attempt, size_t keep_lines) {
  std::string directory = fmt::format("{}/logs/attempt-{}", output_dir, attempt);
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) {
    return io_error(fmt::format("cannot create log directory {}: {}", directory, error.message()));
  }
  return std::unique_ptr<WorkerLogWriter>(new WorkerLogWriter(std::move(directory), keep_lines));
}

WorkerLogWriter::~WorkerLogWriter() {
  for (auto& [rank, log] : ranks_) {
    if (log.file) fclose(log.file);
  }
}

std::string WorkerLogWriter::path_for(int rank) const {
  return fmt::format("{}/rank-{}.log", directory_, rank);
}

cohort::Status WorkerLogWriter::write_line(int rank, std::string_view line) {
  std::lock_guard lock(mutex_);
  RankLog& log = ranks_[rank];
  if (keep_lines_ > 0) {
    // The root-cause report shows 1 KiB of a line; 4 KiB each keeps the tail
    // small whatever the rank prints (64 KiB pieces of a runaway line).
    constexpr size_t kMaxKeptLineBytes = 4096;
    if (log.recent.size() == keep_lines_) log.recent.pop_front();
    log.recent.emplace_back(line.substr(0, kMaxKeptLineBytes));
  }
  if (!log.file) {
    // Append: a restarted agent reusing an attempt folder must not erase it.
    log.file = fopen(path_for(rank).c_str(), "ae");
    if (!log.file) return errno_error("opening " + path_for(rank));
  }
  std::string text = fmt::format("[rank {}] {}\n", rank, line);
  if (fwrite(text.data(), 1, text.size(), log.file) != text.size() || fflush(log.file) != 0) {
    return errno_error("writing " + path_for(rank));
  }
  return cohort::Status::ok();
}

std::vector<std::string> WorkerLogWriter::last_lines(int rank, size_t n) const {
  std::lock_guard lock(mutex_);
  auto it = ranks_.find(rank);
  if (it == ranks_.end()) return {};
  const auto& recent = it->second.recent;
  size_t count = std::min(n, recent.size());
  return std::vector<std::string>(recent.end() - count, recent.end());
}

}  // namespace cohort::agent
