// Clock: the time source daemons use, injectable so tests can drive
// heartbeat, hang and placement timeouts without sleeping.
#pragma once

#include <atomic>
#include <chrono>

namespace cohort {

class Clock {
 public:
  using Duration = std::chrono::steady_clock::duration;
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~Clock() = default;
  virtual TimePoint now() const = 0;
};

class SystemClock final : public Clock {
 public:
  TimePoint now() const override { return std::chrono::steady_clock::now(); }
  static SystemClock& instance() {
    static SystemClock clock;
    return clock;
  }
};

// A clock that moves only when told. Thread-safe.
class ManualClock final : public Clock {
 public:
  TimePoint now() const override { return TimePoint(Duration(ticks_.load())); }
  void advance(Duration d) { ticks_ += d.count(); }

 private:
  std::atomic<Duration::rep> ticks_{Duration(std::chrono::hours(1)).count()};
};

}  // namespace cohort
