// The progress line `cohort run` keeps at the bottom of a terminal: step,
// loss, tokens/s and ETA of a training job, read from the progress file rank
// 0 rewrites every step (<output_dir>/progress/attempt-<A>/rank-0). Log lines
// scroll above it. Nothing is drawn when stderr is not a terminal.
#pragma once

#include <string>

namespace cohort::cli {

// "42s", "3m05s", "2h10m": the durations the CLI prints.
std::string format_duration(double seconds);

class ProgressLine {
 public:
  explicit ProgressLine(std::string output_dir);
  bool enabled() const { return enabled_; }
  // Erases the line (before printing a log line above it).
  void clear();
  // Redraws it from the newest progress file, if there is one.
  void refresh();

 private:
  std::string progress_dir_;
  bool enabled_ = false;
  bool shown_ = false;
};

}  // namespace cohort::cli
