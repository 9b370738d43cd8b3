// MetricsTail: follows a training attempt's metrics.jsonl on the node that
// runs rank 0, so the agent can forward new rows to the coordinator (the web
// page's plots, /metrics) without the worker knowing about the control plane.
//
// It starts reading once rank 0's progress file for the attempt exists: by
// then the worker has rewritten metrics.jsonl to the rows of the checkpoint
// it resumed from, so the tail never reads rows the attempt is about to drop.
// A file that shrinks (rewritten) is read again from the start; the
// coordinator's series rewinds on repeated steps. Bounded: each read takes at
// most `max_bytes` of the file and `max_rows` rows; the rest comes next time.
//
// Threading: none; the agent's loop thread uses it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "protocol/messages.h"

namespace cohort::agent {

class MetricsTail {
 public:
  MetricsTail(const std::string& output_dir, int attempt);

  // Rows appended since the last call. `now` (unix seconds) stamps rows that
  // carry no `time` of their own.
  std::vector<protocol::MetricRow> read(double now, size_t max_rows = 500, size_t max_bytes = 1u << 20);
  // From rank 0's progress file, as of the last read(): 0 and -1 when unknown.
  int64_t total_steps() const { return total_steps_; }
  double eta_s() const { return eta_s_; }

 private:
  void read_progress();

  std::string metrics_path_;
  std::string progress_path_;
  bool started_ = false;
  uint64_t offset_ = 0;
  int64_t total_steps_ = 0;
  double eta_s_ = -1;
};

// One metrics.jsonl line as a row; false for a line that is not a JSON
// object with an integer `step` (checkpoint and sample events have one too:
// the coordinator keeps only rows with a loss or an eval_loss).
bool parse_metric_row(const std::string& line, double now, protocol::MetricRow* row);

}  // namespace cohort::agent
