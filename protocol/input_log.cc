// A token bucket of kInputLogBurst lines per second for bad-input warnings.
#include "protocol/input_log.h"

#include <chrono>
#include <mutex>

#include <spdlog/spdlog.h>

namespace cohort::protocol {

std::string shorten(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  return std::string(text.substr(0, max_bytes)) + "… (" + std::to_string(text.size()) + " bytes)";
}

bool warn_bad_input(std::string_view text) {
  using Clock = std::chrono::steady_clock;
  static std::mutex mu;
  static Clock::time_point window;
  static int in_window = 0;
  static long suppressed = 0;
  long dropped_before = 0;
  {
    std::lock_guard lock(mu);
    auto now = Clock::now();
    if (now - window >= std::chrono::seconds(1)) {
      window = now;
      in_window = 0;
    }
    if (in_window >= kInputLogBurst) {
      ++suppressed;
      return false;
    }
    ++in_window;
    dropped_before = suppressed;
    suppressed = 0;
  }
  if (dropped_before > 0) {
    spdlog::warn("{} (and {} similar lines suppressed)", shorten(text, kMaxInputLogBytes), dropped_before);
  } else {
    spdlog::warn("{}", shorten(text, kMaxInputLogBytes));
  }
  return true;
}

}  // namespace cohort::protocol
