// TrainingSeries: a training job's figures over its steps (loss, eval loss,
// learning rate, tokens/s, MFU, gradient norm), from the metrics.jsonl rows
// the agent of rank 0's node forwards. The dashboard plots them and
// /metrics exports the newest.
//
// Bounded: each of the two streams (training rows, evaluation rows) keeps at
// most `max_points`. When a stream is full it drops every other point and
// from then on keeps every 2nd (then 4th, ...) row, so the whole run stays in
// view at a coarser grain; the newest row is always kept as latest().
// A row whose step is not past the stream's last one (a restarted attempt
// resuming from an earlier checkpoint) first drops the points from that step
// on, so the plot reads as one run, as metrics.jsonl does.
//
// Threading: none; the coordinator's loop thread owns it.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "protocol/messages.h"

namespace cohort::coordinator {

enum class Figure { kLoss, kEvalLoss, kLearningRate, kTokensPerSecond, kMfu, kGradNorm };
inline constexpr int kFigureCount = 6;
// The metrics.jsonl key of a figure ("loss", "eval_loss", "lr", ...).
const char* row_key(Figure figure);

struct TrainingPoint {
  int64_t step = 0;
  double time = 0;  // unix seconds
  std::array<double, kFigureCount> values;  // NaN where the row had none

  TrainingPoint() { values.fill(std::nan("")); }
  double get(Figure f) const { return values[int(f)]; }
  bool has(Figure f) const { return std::isfinite(values[int(f)]); }
};

class TrainingSeries {
 public:
  explicit TrainingSeries(size_t max_points = 2000) : max_points_(max_points < 4 ? 4 : max_points) {}

  // Rows with neither loss nor eval_loss (checkpoint and sample events) are
  // ignored; so are values that are not finite.
  void add(const protocol::MetricRow& row);

  // Points in step order: training rows, or evaluation rows (eval_loss).
  const std::vector<TrainingPoint>& training() const { return training_.points; }
  const std::vector<TrainingPoint>& evaluation() const { return evaluation_.points; }
  std::optional<TrainingPoint> latest() const { return training_.latest; }
  std::optional<TrainingPoint> latest_eval() const { return evaluation_.latest; }
  bool empty() const { return !training_.latest && !evaluation_.latest; }

 private:
  struct Stream {
    std::vector<TrainingPoint> points;
    std::optional<TrainingPoint> latest;
    size_t stride = 1;   // keep one row in `stride`
    size_t skipped = 0;  // rows not kept since the last kept one
  };
  void add_to(Stream& stream, const TrainingPoint& point) const;

  size_t max_points_;
  Stream training_;
  Stream evaluation_;
};

}  // namespace cohort::coordinator
