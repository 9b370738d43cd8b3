#include "cli/progress_line.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace cohort::cli {
namespace fs = std::filesystem;

ProgressLine::ProgressLine(std::string output_dir)
    : progress_dir_((fs::path(output_dir) / "progress").string()), enabled_(::isatty(STDERR_FILENO) == 1) {}

void ProgressLine::clear() {
  if (!shown_) return;
  std::fputs("\r\033[K", stderr);
  shown_ = false;
}

std::string format_duration(double seconds) {
  int s = int(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

namespace {

// The rank-0 progress file of the newest attempt.
fs::path newest_progress_file(const fs::path& dir) {
  fs::path best;
  int best_attempt = -1;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("attempt-", 0) != 0) continue;
    int attempt = std::atoi(name.c_str() + 8);
    if (attempt > best_attempt && fs::exists(entry.path() / "rank-0", ec)) {
      best_attempt = attempt;
      best = entry.path() / "rank-0";
    }
  }
  return best;
}

}  // namespace

void ProgressLine::refresh() {
  if (!enabled_) return;
  fs::path file = newest_progress_file(progress_dir_);
  if (file.empty()) return;
  std::ifstream in(file);
  nlohmann::json row;
  try {
    row = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception&) {
    return;  // not written yet, or a command job's own touch
  }
  if (!row.contains("step") || !row.contains("total_steps")) return;
  std::string text = fmt::format("step {}/{}  loss {:.4f}  {:.0f} tok/s  ETA {}", row.value("step", 0),
                                 row.value("total_steps", 0), row.value("loss", 0.0), row.value("tokens_per_s", 0.0),
                                 format_duration(row.value("eta_s", 0.0)));
  std::fprintf(stderr, "\r\033[K%s", text.c_str());
  std::fflush(stderr);
  shown_ = true;
}

}  // namespace cohort::cli
