// JobView: what the web page and /metrics show of a job beyond the client's
// JobInfo: where each rank of the current attempt runs, and the training
// figures. Made on the coordinator's thread, read within one HTTP request.
#pragma once

#include <string>
#include <vector>

#include "coordinator/training_series.h"
#include "protocol/messages.h"

namespace cohort::coordinator {

struct Job;

struct RankView {
  int rank = 0;
  std::string node;
  int gpu = -1;        // the node's GPU index (a CPU slot's number on CPU nodes)
  std::string state;   // running | unconfirmed | exited
  std::string detail;  // "exit 0", "exit 3", "SIGKILL"; empty while running
};

struct JobView {
  protocol::JobInfo info;
  int attempt = 0;              // the current attempt's number, 0 before the first
  std::vector<RankView> ranks;  // of the current attempt, by rank
  int64_t total_steps = 0;      // from the newest training row, when it says
  const TrainingSeries* training = nullptr;  // owned by the coordinator; never null
  // Its owner (the client key that submitted it) and the scheduling keys
  // the job set (priority, preemptible, time_limit, depends_on), as the job
  // page's rows: {label, value}.
  std::vector<std::pair<std::string, std::string>> scheduling;
};

JobView make_job_view(const Job& job);

}  // namespace cohort::coordinator
