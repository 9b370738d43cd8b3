#include "train/train_report.h"
#include "base/atomic_file.h"
#include "base/env_knobs.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <spdlog/spdlog.h>

namespace cohort::train {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

TrainReporter::TrainReporter(const std::string& output_dir, bool writes_metrics, int resumed_step,
                             int log_every, bool tensorboard)
    : metrics_path_((fs::path(output_dir) / "metrics.jsonl").string()),
      writes_metrics_(writes_metrics),
      first_step_(resumed_step),
      log_every_(log_every < 1 ? 1 : log_every) {
  if (const char* p = read_env_knob(EnvKnob::kProgressFile)) progress_path_ = p;
  if (!writes_metrics_) return;
  std::error_code ec;
  fs::create_directories(output_dir, ec);
  // Keep the rows up to the checkpoint this attempt resumed from.
  std::ifstream in(metrics_path_);
  std::vector<std::string> kept;
  for (std::string line; std::getline(in, line);) {
    try {
      json row = json::parse(line);
      if (row.value("step", 0) <= resumed_step) kept.push_back(line);
    } catch (const json::exception&) {
    }
  }
  in.close();
  std::ofstream out(metrics_path_, std::ios::trunc);
  for (const auto& line : kept) out << line << "\n";
  if (tensorboard) {
    auto writer = TensorBoardWriter::open((fs::path(output_dir) / "tensorboard").string(), unix_seconds());
    if (writer) {
      tensorboard_ = std::move(*writer);
    } else {
      spdlog::warn("train.tensorboard: {}; going on without event files", writer.status().message());
    }
  }
}

void TrainReporter::append(const json& row) {
  if (!writes_metrics_) return;
  json stamped = row;
  stamped["time"] = unix_seconds();
  std::ofstream out(metrics_path_, std::ios::app);
  // A sample's text may be bytes a small model strung together that are
  // not UTF-8: written with U+FFFD in their place rather than thrown.
  out << stamped.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  if (!tensorboard_) return;
  // Every numeric figure of the row but its step and time, under the same name.
  std::vector<std::pair<std::string, float>> scalars;
  for (auto it = row.begin(); it != row.end(); ++it) {
    if (it->is_number() && !it->is_boolean() && it.key() != "step") scalars.push_back({it.key(), it->get<float>()});
  }
  if (scalars.empty()) return;
  if (auto s = tensorboard_->add_scalars(stamped["time"].get<double>(), row.value("step", 0), scalars); !s) {
    spdlog::warn("train.tensorboard: {}; no more event files this attempt", s.message());
    tensorboard_.reset();
  }
}

void TrainReporter::touch_progress(const json& row) {
  if (progress_path_.empty()) return;
  // Written whole and renamed, so a reader never sees half a line; the
  // agent reads the modification time for hang detection.
  (void)write_file_atomically(progress_path_, row.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");  // a missed touch only delays hang detection
}

void TrainReporter::step(const StepReport& r) {
  json row = {{"step", r.step},           {"loss", r.loss},
              {"lr", r.lr},               {"grad_norm", r.grad_norm},
              {"tokens_per_s", r.tokens_per_s}, {"memory_mb", r.memory_mb},
              {"activation_mb", r.activation_mb}, {"step_seconds", r.step_seconds}};
  if (r.mfu) row["mfu"] = *r.mfu;
  if (r.loss_scale) row["loss_scale"] = *r.loss_scale;
  if (r.skipped) row["skipped"] = true;
  append(row);
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  int done = r.step - first_step_;
  double eta = done > 0 ? elapsed / done * (r.total_steps - r.step) : 0;
  json progress = row;
  progress["total_steps"] = r.total_steps;
  progress["eta_s"] = eta;
  touch_progress(progress);
  bool log_line = r.step % log_every_ == 0 || r.step == r.total_steps || r.step == first_step_ + 1 || r.skipped;
  if (writes_metrics_ && log_line)
    spdlog::info("step {}/{} loss {:.4f} lr {:.2e} grad_norm {:.3f} {:.0f} tok/s{}{}{} eta {:.0f}s", r.step,
                 r.total_steps, r.loss, r.lr, r.grad_norm, r.tokens_per_s,
                 r.mfu ? fmt::format(" mfu {:.1f}%", *r.mfu * 100) : std::string(),
                 r.loss_scale ? fmt::format(" loss_scale {:g}", *r.loss_scale) : std::string(),
                 r.skipped ? " (skipped: gradients not finite; loss scale lowered)" : "", eta);
}

void TrainReporter::eval(int step, double eval_loss) {
  append({{"step", step}, {"eval_loss", eval_loss}});
  if (writes_metrics_) spdlog::info("step {} eval_loss {:.4f}", step, eval_loss);
}

void TrainReporter::event(const json& row) { append(row); }

}  // namespace cohort::train
