// Job lifecycle after placement: stopping attempts, rank exits, how an
// attempt ends (success, restart, failure), node loss, reconciling with the
// agents' reports, and recovery after a coordinator restart. The state
// machines are documented in job_record.h; placement is in job_placement.cc.
#include <algorithm>
#include <csignal>
#include <cstring>

#include <spdlog/spdlog.h>

#include "coordinator/coordinator_impl.h"

namespace cohort::coordinator {

using namespace protocol;

namespace {

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "SIG" + std::to_string(sig);
}

std::string describe_exit(const WorkerExit& m) {
  if (!m.failure.empty()) return m.failure;
  if (m.signal != 0) return "killed by signal " + std::to_string(m.signal) + " (" + signal_name(m.signal) + ")";
  return "exited with code " + std::to_string(m.exit_code);
}

}  // namespace

void CoordinatorImpl::begin_stop(Job& job, StopIntent intent, const std::string& reason) {
  Attempt* a = job.current();
  if (!a || a->state != AttemptState::kRunning) return;
  a->state = AttemptState::kStopping;
  a->stop_began = clock_.now();
  a->stop_intent = intent;
  a->reason = reason;
  job.state = JobState::kStopping;
  // Ranks still waiting for MASTER_PORT were never launched: nothing to stop.
  for (auto& r : a->ranks) {
    if (r.state == RankState::kHeld) r.state = RankState::kExited;
  }
  job.add_event("stopping attempt " + std::to_string(a->number) + ": " + reason);
  spdlog::info("job {} attempt {}: stopping ({})", job.id, a->number, reason);
  std::vector<std::string> unreachable;
  for (const auto& node : a->nodes) {
    const Node* n = registry_.find(node);
    bool was_connected = n && is_connected(n->state);
    if (!send_to_node(node, StopOrder{job.id, a->number, reason})) {
      // Nobody is left there to report: its ranks are gone with it.
      for (auto& r : a->ranks) {
        if (r.node == node) r.state = RankState::kExited;
      }
      // A connected node that cannot be reached is lost now, not at its
      // heartbeat timeout: the restart must not be placed there, and the
      // loss is the likelier cause of the failure that began this stop.
      if (was_connected) unreachable.push_back(node);
    }
  }
  persist(job);
  lose_unreachable_nodes(unreachable);
  check_attempt_done(job);
}

void CoordinatorImpl::rank_exited(Job& job, int rank, const WorkerExit& m) {
  Attempt& a = *job.current();
  RankRecord& r = a.ranks[rank];
  if (r.state == RankState::kExited) return;
  r.state = RankState::kExited;
  r.exit_code = m.exit_code;
  r.signal = m.signal;
  r.success = m.failure.empty() && m.signal == 0 && m.exit_code == 0 && !m.stopped;
  if (!r.success && a.state == AttemptState::kRunning) {
    a.has_root_cause = true;
    a.root_cause.rank = rank;
    a.root_cause.node = m.node;
    a.root_cause.exit_code = m.exit_code;
    a.root_cause.signal = m.signal;
    a.root_cause.reason = describe_exit(m);
    a.root_cause.last_lines =
        m.last_lines.empty() ? logs_.tail(job.id, a.number, rank, 20) : m.last_lines;
    begin_stop(job, StopIntent::kFailure,
               "rank " + std::to_string(rank) + " on " + m.node + " " + a.root_cause.reason);
    return;
  }
  check_attempt_done(job);
}

void CoordinatorImpl::check_attempt_done(Job& job) {
  Attempt* a = job.current();
  if (a && a->active() && a->all_exited()) finish_attempt(job);
}

void CoordinatorImpl::finish_attempt(Job& job) {
  Attempt& a = *job.current();
  a.ended_ms = unix_ms_now();
  store_.drop_namespace(RendezvousStore::namespace_of(job.id, a.number));
  if (a.state == AttemptState::kRunning) {
    bool all_ok = std::all_of(a.ranks.begin(), a.ranks.end(), [](auto& r) { return r.success; });
    a.state = all_ok ? AttemptState::kSucceeded : AttemptState::kFailed;
    a.reason = all_ok ? "every rank exited 0" : "ranks ended without success";
    if (all_ok) {
      end_job(job, JobState::kSucceeded, "every rank exited 0");
    } else {
      end_job(job, JobState::kFailed, a.reason);
    }
  } else if (job.cancel_requested) {
    a.state = AttemptState::kStopped;
    end_job(job, JobState::kCancelled, "cancelled");
  } else if (a.stop_intent == StopIntent::kTimeLimit) {
    a.state = AttemptState::kStopped;
    end_job(job, JobState::kTimedOut, a.reason);
  } else if (a.stop_intent == StopIntent::kFailure) {
    a.state = AttemptState::kFailed;
    if (job.restarts_used < job.control.max_restarts) {
      ++job.restarts_used;
      requeue(job, true,
              "restart " + std::to_string(job.restarts_used) + " of " +
                  std::to_string(job.control.max_restarts) + " after: " + a.reason);
    } else {
      job.has_root_cause = a.has_root_cause;
      job.root_cause = a.root_cause;
      end_job(job, JobState::kFailed,
              job.control.max_restarts > 0
                  ? "failed after " + std::to_string(job.attempts.size()) + " attempts: " + a.reason
                  : a.reason);
    }
  } else {
    a.state = AttemptState::kStopped;
    requeue(job, false, a.reason);
  }
  schedule();
}

void CoordinatorImpl::requeue(Job& job, bool counts, const std::string& why) {
  job.state = JobState::kQueued;
  job.next_attempt_counts = counts;
  job.queued_since = clock_.now();
  job.message = why;
  job.add_event("requeued: " + why);
  persist(job);
}

void CoordinatorImpl::end_job(Job& job, JobState state, const std::string& message) {
  job.state = state;
  job.message = message;
  job.ended_ms = unix_ms_now();
  job.add_event(std::string(to_string(state)) + ": " + message);
  spdlog::info("job {} {}: {}", job.id, to_string(state), message);
  persist(job);
}

void CoordinatorImpl::on_node_lost(const std::string& node, const std::string& why) {
  std::string cause = why.empty() ? "no heartbeat for " + std::to_string(options_.heartbeat_timeout.count()) + " ms" : why;
  spdlog::warn("node {} lost: {}", node, cause);
  std::string reason = "node " + node + " lost (" + cause + ")";
  std::vector<std::string> ids;
  for (const auto& [id, job] : jobs_) ids.push_back(id);
  // By id: a restart placed from within this loop must not invalidate it.
  for (const auto& id : ids) {
    Job& job = jobs_.at(id);
    Attempt* a = job.current();
    if (!a || !a->active() || !a->gpus.count(node)) continue;
    int first = -1;
    for (int r = 0; r < a->world_size(); ++r) {
      if (a->ranks[r].node != node) continue;
      if (first < 0) first = r;
      a->ranks[r].state = RankState::kExited;
    }
    if (a->state == AttemptState::kRunning) {
      a->has_root_cause = true;
      a->root_cause = RootCause{std::max(first, 0), node, 0, 0, reason, {}};
      a->root_cause_is_node_loss = true;
      begin_stop(job, StopIntent::kFailure, reason);
      continue;
    }
    if (loss_caused_the_stop(*a)) {
      std::string consequence = a->has_root_cause ? "rank " + std::to_string(a->root_cause.rank) + " on " +
                                                        a->root_cause.node + " " + a->root_cause.reason
                                                  : a->reason;
      a->has_root_cause = true;
      a->root_cause = RootCause{std::max(first, 0), node, 0, 0, reason, {}};
      a->root_cause_is_node_loss = true;
      a->reason = reason;
      job.add_event("root cause of attempt " + std::to_string(a->number) + ": " + reason + "; the failure of " +
                    consequence + " followed from it");
      spdlog::info("job {} attempt {}: root cause is {} ({} followed from it)", job.id, a->number, reason,
                   consequence);
      persist(job);
    }
    check_attempt_done(job);
  }
}

bool CoordinatorImpl::loss_caused_the_stop(const Attempt& a) const {
  return a.state == AttemptState::kStopping && a.stop_intent == StopIntent::kFailure &&
         !a.root_cause_is_node_loss && clock_.now() - a.stop_began <= options_.consequence_window;
}

void CoordinatorImpl::reconcile_worker(const std::string& node, const RunningWorker& w) {
  auto it = jobs_.find(w.job_id);
  Attempt* a = it == jobs_.end() ? nullptr : it->second.current();
  bool current = a && a->number == w.attempt && a->active() && w.rank >= 0 &&
                 w.rank < a->world_size() && a->ranks[w.rank].node == node;
  if (!current) {
    spdlog::info("node {} runs job {} attempt {} rank {}, which is no longer wanted: stopping it",
                 node, w.job_id, w.attempt, w.rank);
    send_to_node(node, StopOrder{w.job_id, w.attempt, "not a current attempt"});
    return;
  }
  if (a->ranks[w.rank].state == RankState::kUnconfirmed) a->ranks[w.rank].state = RankState::kRunning;
}

void CoordinatorImpl::reconcile_missing(const std::string& node,
                                        const std::vector<RunningWorker>& running) {
  // Exits travel before heartbeats on the agent's one connection, so a rank
  // missing from a heartbeat well after its launch (or stop) order is gone.
  auto grace = std::max<Clock::Duration>(std::chrono::seconds(2), 4 * options_.heartbeat_interval);
  auto now = clock_.now();
  std::vector<std::string> ids;
  for (const auto& [id, job] : jobs_) ids.push_back(id);
  for (const auto& id : ids) {
    Job& job = jobs_.at(id);
    Attempt* a = job.current();
    if (!a || !a->active() || !a->gpus.count(node)) continue;
    auto since = a->state == AttemptState::kStopping ? a->stop_began : a->launched_at;
    if (now - since < grace) continue;
    for (int r = 0; r < a->world_size(); ++r) {
      if (a->ranks[r].node != node || a->ranks[r].state != RankState::kRunning) continue;
      bool listed = std::any_of(running.begin(), running.end(), [&](const RunningWorker& w) {
        return w.job_id == id && w.attempt == a->number && w.rank == r;
      });
      if (listed) continue;
      WorkerExit gone;
      gone.job_id = id;
      gone.attempt = a->number;
      gone.node = node;
      gone.rank = r;
      gone.stopped = a->state == AttemptState::kStopping;
      gone.failure = "the agent on " + node + " no longer runs rank " + std::to_string(r) +
                     " (its exit report was lost)";
      rank_exited(job, r, gone);
      a = job.current();
      if (!a || !a->active()) break;
    }
  }
}

void CoordinatorImpl::check_recovery() {
  auto now = clock_.now();
  for (auto& [id, job] : jobs_) {
    Attempt* a = job.current();
    if (!a || !a->active()) continue;
    int unconfirmed = 0;
    for (const auto& r : a->ranks) unconfirmed += r.state == RankState::kUnconfirmed;
    if (unconfirmed == 0) {
      if (a->recovery_deadline != Clock::TimePoint{}) {
        a->recovery_deadline = {};
        job.add_event("recovered: every rank of attempt " + std::to_string(a->number) +
                      " reported alive after the coordinator restarted");
        persist(job);
      }
      continue;
    }
    if (now < a->recovery_deadline) continue;
    // Their agents did not report them in time: count them as gone.
    for (auto& r : a->ranks) {
      if (r.state == RankState::kUnconfirmed) r.state = RankState::kExited;
    }
    a->recovery_deadline = {};
    if (a->state == AttemptState::kRunning) {
      begin_stop(job, StopIntent::kRecovery,
                 std::to_string(unconfirmed) +
                     " rank(s) not reported by their agents after the coordinator restarted");
    } else {
      check_attempt_done(job);
    }
  }
}

Status CoordinatorImpl::save_job(const Job& job) {
  if (!db_) return Status::ok();
  Status s = db_->save_job(job);
  if (!s) spdlog::error("cannot save job {}: {}", job.id, s.message());
  return s;
}

Status CoordinatorImpl::recover_from_db() {
  COHORT_ASSIGN_OR_RETURN(auto nodes, db_->load_nodes());
  for (auto& n : nodes) {
    registry_.restore_node(n.name, n.address, std::move(n.gpus), n.drained, n.drain_reason, n.left);
  }
  COHORT_ASSIGN_OR_RETURN(node_keys_, db_->load_node_keys());
  COHORT_ASSIGN_OR_RETURN(auto jobs, db_->load_jobs());
  auto deadline = clock_.now() + options_.recovery_grace;
  int active = 0;
  for (auto& job : jobs) {
    next_seq_ = std::max(next_seq_, job.seq + 1);
    job.queued_since = clock_.now();
    job.owner = owner_of_key(job.owner_key, options_.security);  // names may have changed in authorized_clients
    if (!job.attempts.empty()) {
      auto ran = std::chrono::milliseconds(std::max<int64_t>(0, unix_ms_now() - job.attempts.front().started_ms));
      job.first_started = clock_.now() - ran;
    }
    if (Attempt* a = job.current(); a && a->active()) {
      a->recovery_deadline = deadline;
      ++active;
    }
    if (!is_terminal(job.state)) job.add_event("coordinator restarted");
    std::string id = job.id;
    jobs_.emplace(id, std::move(job));
  }
  COHORT_ASSIGN_OR_RETURN(auto logs, db_->load_logs());
  size_t lines = 0;
  for (auto& job_lines : logs) {
    lines += job_lines.lines.size();
    if (jobs_.count(job_lines.job_id)) {
      logs_.restore(job_lines.job_id, std::move(job_lines.lines));
    } else if (auto s = db_->remove_logs(job_lines.job_id); !s) {  // its job was removed before the lines
      spdlog::error("{}", s.message());
    }
  }
  spdlog::info("state restored from {}: {} job(s), {} with a running attempt, {} node(s), {} log line(s)",
               options_.state_dir, jobs_.size(), active, nodes.size(), lines);
  return Status::ok();
}

}  // namespace cohort::coordinator
