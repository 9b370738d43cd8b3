// What the trainer tells the outside world each step: metrics.jsonl rows
// (rank 0; each with `time`, unix seconds, so runs plot against time), the
// progress file the agent watches for hang detection and `cohort run`'s
// progress line, the log line, and TensorBoard scalars when asked for.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "train/tensorboard_writer.h"

namespace cohort::train {

struct StepReport {
  int step = 0;  // 1-based: the step just completed
  int total_steps = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  std::optional<double> mfu;
  double memory_mb = 0;
  double activation_mb = 0;  // the model's activation arena (train.activation_checkpointing)
  double step_seconds = 0;
  std::optional<double> loss_scale;  // fp16: the scale this step's loss was multiplied by
  bool skipped = false;              // fp16: non-finite gradients, no update applied
};

class TrainReporter {
 public:
  // metrics.jsonl lives in output_dir; rows past `resumed_step` from an
  // earlier attempt are dropped so the file reads as one run.
  // `tensorboard`: rank 0 also writes event files under output_dir/tensorboard
  // (a file it cannot create is logged and training goes on without it).
  TrainReporter(const std::string& output_dir, bool writes_metrics, int resumed_step, int log_every = 1,
                bool tensorboard = false);

  void step(const StepReport& report);
  void eval(int step, double eval_loss);
  void event(const nlohmann::json& row);  // checkpoint, sample, ...

 private:
  void append(const nlohmann::json& row);
  void touch_progress(const nlohmann::json& row);

  std::unique_ptr<TensorBoardWriter> tensorboard_;
  std::string metrics_path_;
  std::string progress_path_;
  bool writes_metrics_ = false;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  int first_step_ = 0;
  int log_every_ = 1;
};

}  // namespace cohort::train
