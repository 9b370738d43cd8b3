#include "coordinator/training_series.h"

#include <algorithm>

namespace cohort::coordinator {

const char* row_key(Figure figure) {
  switch (figure) {
    case Figure::kLoss: return "loss";
    case Figure::kEvalLoss: return "eval_loss";
    case Figure::kLearningRate: return "lr";
    case Figure::kTokensPerSecond: return "tokens_per_s";
    case Figure::kMfu: return "mfu";
    case Figure::kGradNorm: return "grad_norm";
  }
  return "";
}

void TrainingSeries::add(const protocol::MetricRow& row) {
  TrainingPoint point;
  point.step = row.step;
  point.time = std::isfinite(row.time) ? row.time : 0;
  for (int f = 0; f < kFigureCount; ++f) {
    auto it = row.values.find(row_key(Figure(f)));
    if (it != row.values.end() && std::isfinite(it->second)) point.values[f] = it->second;
  }
  if (point.has(Figure::kLoss)) {
    point.values[int(Figure::kEvalLoss)] = std::nan("");
    add_to(training_, point);
  } else if (point.has(Figure::kEvalLoss)) {
    TrainingPoint eval;
    eval.step = point.step;
    eval.time = point.time;
    eval.values[int(Figure::kEvalLoss)] = point.get(Figure::kEvalLoss);
    add_to(evaluation_, eval);
  }
}

void TrainingSeries::add_to(Stream& s, const TrainingPoint& point) const {
  if (s.latest && point.step <= s.latest->step) {
    // A resumed attempt: what came after its checkpoint is no longer the run.
    auto from = std::lower_bound(s.points.begin(), s.points.end(), point.step,
                                 [](const TrainingPoint& p, int64_t step) { return p.step < step; });
    s.points.erase(from, s.points.end());
    s.skipped = 0;
  }
  s.latest = point;
  if (!s.points.empty() && s.skipped + 1 < s.stride) {
    ++s.skipped;
    return;
  }
  s.skipped = 0;
  s.points.push_back(point);
  if (s.points.size() <= max_points_) return;
  // Full: keep every other point (the first and the newest stay).
  std::vector<TrainingPoint> kept;
  kept.reserve(s.points.size() / 2 + 1);
  for (size_t i = 0; i < s.points.size(); i += 2) kept.push_back(s.points[i]);
  if (kept.back().step != s.points.back().step) kept.push_back(s.points.back());
  s.points = std::move(kept);
  s.stride *= 2;
}

}  // namespace cohort::coordinator
