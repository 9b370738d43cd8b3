#include "coordinator/job_view.h"

#include <fmt/format.h>

#include <csignal>
#include <cstring>

#include "coordinator/job_record.h"

namespace cohort::coordinator {
namespace {

std::string describe_exit(const RankRecord& r) {
  if (r.signal > 0) {
    const char* name = sigabbrev_np(r.signal);
    return name ? std::string("SIG") + name : "signal " + std::to_string(r.signal);
  }
  return "exit " + std::to_string(r.exit_code);
}

const char* to_string(RankState state) {
  switch (state) {
    case RankState::kHeld: return "starting";
    case RankState::kRunning: return "running";
    case RankState::kUnconfirmed: return "unconfirmed";
    case RankState::kExited: return "exited";
  }
  return "unknown";
}

}  // namespace

JobView make_job_view(const Job& job) {
  JobView view;
  view.info = job.info();
  view.training = &job.training;
  view.total_steps = job.total_steps;
  const auto& c = job.control;
  if (!job.owner.empty()) view.scheduling.push_back({"owner", job.owner});
  if (c.priority != 0 || c.preemptible) {
    view.scheduling.push_back({"priority", std::to_string(c.priority) + (c.preemptible ? ", preemptible" : "")});
  }
  if (c.time_limit_s > 0) view.scheduling.push_back({"time limit", fmt::format("{:g} s", c.time_limit_s)});
  if (!c.depends_on.empty()) {
    std::string list;
    for (const auto& d : c.depends_on) list += (list.empty() ? "" : ", ") + d.job_id + ":" + jobs::to_string(d.kind);
    view.scheduling.push_back({"depends on", list});
  }
  if (job.attempts.empty()) return view;
  const Attempt& a = job.attempts.back();
  view.attempt = a.number;
  for (int rank = 0; rank < a.world_size(); ++rank) {
    const RankRecord& r = a.ranks[rank];
    RankView rv;
    rv.rank = rank;
    rv.node = r.node;
    int local = a.gpus_per_node > 0 ? rank % a.gpus_per_node : 0;
    auto gpus = a.gpus.find(r.node);
    if (gpus != a.gpus.end() && local < int(gpus->second.size())) rv.gpu = gpus->second[local];
    rv.state = to_string(r.state);
    if (r.state == RankState::kExited) rv.detail = describe_exit(r);
    view.ranks.push_back(std::move(rv));
  }
  return view;
}

}  // namespace cohort::coordinator
