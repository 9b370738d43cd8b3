// Queue rules beyond gang placement and FIFO within priority (job_record.h
// has the transitions): job.depends_on, job.time_limit, preemption of
// job.preemptible work by higher-priority jobs, and per-client-key limits
// (key_limits.h). schedule() in job_placement.cc consults them.
#include <algorithm>

#include <fmt/format.h>

#include "coordinator/coordinator_impl.h"

namespace cohort::coordinator {

bool CoordinatorImpl::preempt_for(const Job& job) {
  // Already waiting for some to stop: the GPUs they free come to this job.
  for (auto& [id, other] : jobs_) {
    const Attempt* a = other.current();
    if (a && a->state == AttemptState::kStopping && a->stop_intent == StopIntent::kPreempt &&
        other.control.priority < job.control.priority) {
      return true;
    }
  }
  // Candidates: running preemptible jobs of lower priority, the lowest
  // priority first, then the newest (the least work lost).
  std::vector<Job*> candidates;
  for (auto& [id, other] : jobs_) {
    const Attempt* a = other.current();
    if (other.control.preemptible && other.control.priority < job.control.priority && a &&
        a->state == AttemptState::kRunning) {
      candidates.push_back(&other);
    }
  }
  std::sort(candidates.begin(), candidates.end(), [](Job* a, Job* b) {
    if (a->control.priority != b->control.priority) return a->control.priority < b->control.priority;
    return a->seq > b->seq;
  });
  // The fewest candidates, in that order, whose GPUs make the job fit.
  auto cap = capacity();
  std::vector<Job*> chosen;
  for (Job* victim : candidates) {
    for (auto& c : cap) {
      auto it = victim->current()->gpus.find(c.name);
      if (it != victim->current()->gpus.end()) c.free_gpus.insert(c.free_gpus.end(), it->second.begin(), it->second.end());
    }
    chosen.push_back(victim);
    if (place(request_for(job), cap)) break;
  }
  if (chosen.empty() || !place(request_for(job), cap)) return false;
  for (Job* victim : chosen) {
    begin_stop(*victim, StopIntent::kPreempt,
               "preempted by " + job.id + " (priority " + std::to_string(job.control.priority) + " over " +
                   std::to_string(victim->control.priority) + "); it resumes when GPUs are free, no restart used");
  }
  return true;
}

void CoordinatorImpl::check_time_limits() {
  auto now = clock_.now();
  std::vector<Job*> due;
  for (auto& [id, job] : jobs_) {
    double limit = job.control.time_limit_s;
    const Attempt* a = job.current();
    if (limit <= 0 || job.state != JobState::kRunning || !a || a->state != AttemptState::kRunning) continue;
    if (now - job.first_started >= std::chrono::duration<double>(limit)) due.push_back(&job);
  }
  for (Job* job : due) {
    begin_stop(*job, StopIntent::kTimeLimit,
               "time limit of " + fmt::format("{:g}", job->control.time_limit_s) + " s reached (job.time_limit)");
  }
}

std::string CoordinatorImpl::state_of_job(const std::string& id) const {
  if (auto it = jobs_.find(id); it != jobs_.end()) return to_string(it->second.state);
  for (const auto& r : retired_) {
    if (r.id == id) return r.state;
  }
  return "";
}

bool CoordinatorImpl::dependencies_met(Job& job) {
  std::string waiting;
  for (const auto& d : job.control.depends_on) {
    std::string state = state_of_job(d.job_id);
    bool ended = state == "succeeded" || state == "failed" || state == "cancelled" || state == "timed_out";
    bool holds = d.kind == jobs::DependencyKind::kAny     ? ended
                 : d.kind == jobs::DependencyKind::kOk    ? state == "succeeded"
                                                          : ended && state != "succeeded";
    if (holds) continue;
    std::string entry = d.job_id + ":" + jobs::to_string(d.kind);
    if (state.empty() || (ended && !holds)) {
      // Slurm's DependencyNeverSatisfied, ended rather than left pending.
      end_job(job, JobState::kCancelled,
              "dependency " + entry + " can never hold: " +
                  (state.empty() ? d.job_id + " is unknown" : d.job_id + " ended " + state) + " (job.depends_on)");
      return false;
    }
    waiting += (waiting.empty() ? "" : ", ") + entry;
  }
  if (waiting.empty()) return true;
  job.message = "waiting for dependencies: " + waiting + " (job.depends_on)";
  return false;
}

KeyLimits CoordinatorImpl::limits_of(const std::string& key) const {
  return limits_of_key(key, options_.security, options_.max_gpus_per_key, options_.max_queued_per_key);
}

KeyUsage CoordinatorImpl::usage_of(const std::string& key) const {
  KeyUsage usage;
  for (const auto& [id, job] : jobs_) {
    if (job.owner_key != key) continue;
    if (job.state == JobState::kQueued) ++usage.queued_jobs;
    // A stopping attempt still holds its GPUs.
    if (!job.attempts.empty() && job.attempts.back().active()) usage.running_gpus += job.attempts.back().world_size();
  }
  return usage;
}

bool CoordinatorImpl::within_key_limit(Job& job, PlacementRequest* request) {
  KeyLimits limits = limits_of(job.owner_key);
  if (limits.max_gpus == KeyLimits::kNone) return true;
  KeyUsage usage = usage_of(job.owner_key);
  int nodes = nodes_within_gpu_limit(limits, usage, request->gpus_per_node);
  if (nodes >= request->nodes_min) {
    // An elastic job starts on what the key may hold; it grows later when
    // the key's other jobs end (maybe_scale_up).
    request->nodes_max = std::min(request->nodes_max, nodes);
    return true;
  }
  // It holds back nobody: another key's job behind it is not its owner's
  // limit. Its placement_timeout counts from when the limit lets it go.
  job.queued_since = clock_.now();
  std::string why = key_limit_wait(job.owner, limits, usage, request->nodes_min * request->gpus_per_node);
  bool newly = job.message.rfind(kKeyLimitWait, 0) != 0;
  job.message = why;
  if (newly) {
    job.add_event(why);
    persist(job);
  }
  return false;
}

}  // namespace cohort::coordinator
