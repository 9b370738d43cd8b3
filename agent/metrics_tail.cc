#include "agent/metrics_tail.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace cohort::agent {
namespace fs = std::filesystem;

MetricsTail::MetricsTail(const std::string& output_dir, int attempt)
    : metrics_path_((fs::path(output_dir) / "metrics.jsonl").string()),
      progress_path_((fs::path(output_dir) / "progress" / ("attempt-" + std::to_string(attempt)) / "rank-0").string()) {}

bool parse_metric_row(const std::string& line, double now, protocol::MetricRow* row) {
  constexpr size_t kMaxValues = 32;
  auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return false;
  auto step = j.find("step");
  if (step == j.end() || !step->is_number_integer()) return false;
  row->step = step->get<int64_t>();
  row->time = now;
  row->values.clear();
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it->is_number() || it.key() == "step") continue;
    double v = it->get<double>();
    if (!std::isfinite(v)) continue;
    if (it.key() == "time") {
      row->time = v;
    } else if (row->values.size() < kMaxValues && it.key().size() <= 64) {
      row->values[it.key()] = v;
    }
  }
  return true;
}

void MetricsTail::read_progress() {
  std::ifstream in(progress_path_);
  if (!in) return;
  std::string text(64 * 1024, '\0');
  in.read(text.data(), std::streamsize(text.size()));
  text.resize(size_t(in.gcount()));
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return;  // being replaced: keep what we had
  if (auto t = j.find("total_steps"); t != j.end() && t->is_number_integer()) total_steps_ = t->get<int64_t>();
  if (auto e = j.find("eta_s"); e != j.end() && e->is_number()) eta_s_ = e->get<double>();
}

std::vector<protocol::MetricRow> MetricsTail::read(double now, size_t max_rows, size_t max_bytes) {
  std::vector<protocol::MetricRow> rows;
  std::error_code ec;
  if (!started_) {
    if (!fs::exists(progress_path_, ec)) return rows;
    started_ = true;
  }
  read_progress();
  uint64_t size = fs::file_size(metrics_path_, ec);
  if (ec) return rows;
  if (size < offset_) offset_ = 0;  // rewritten
  if (size == offset_) return rows;
  std::ifstream in(metrics_path_, std::ios::binary);
  in.seekg(std::streamoff(offset_));
  std::string chunk(std::min<uint64_t>(size - offset_, max_bytes), '\0');
  in.read(chunk.data(), std::streamsize(chunk.size()));
  chunk.resize(size_t(in.gcount()));
  size_t start = 0;
  while (rows.size() < max_rows) {
    size_t end = chunk.find('\n', start);
    if (end == std::string::npos) break;  // a row still being written
    protocol::MetricRow row;
    if (parse_metric_row(chunk.substr(start, end - start), now, &row)) rows.push_back(std::move(row));
    start = end + 1;
  }
  // A line longer than a whole chunk would stall the tail: skip it.
  if (start == 0 && chunk.size() == max_bytes) start = chunk.size();
  offset_ += start;
  return rows;
}

}  // namespace cohort::agent
