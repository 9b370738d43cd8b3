// The coordinator's answers to clients: submit, queries (paged and bounded in
// bytes), cancel, and removing jobs and nodes. Node messages and the store
// are in coordinator.cc; job lifecycle decisions in job_placement.cc and
// job_lifecycle.cc.
#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "coordinator/admission.h"
#include "coordinator/coordinator_impl.h"
#include "coordinator/dashboard_html.h"
#include "protocol/input_log.h"
#include "protocol/limits.h"

namespace cohort::coordinator {

using namespace protocol;

namespace {

// What an entry adds to a reply, for keeping replies under kMaxReplyBytes.
template <typename T>
size_t encoded_size(const T& value) {
  return nlohmann::json(value).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).size();
}

// What the record implies at `now_ms` (unix ms): elapsed time, GPU-hours
// and, for a running train job, its newest step. Computed here rather than
// by the client so that a client's clock never skews them.
void add_usage(const Job& job, int64_t now_ms, JobInfo* info) {
  const int64_t job_end = job.ended_ms > 0 ? job.ended_ms : now_ms;
  int64_t first_start = 0;
  double gpu_ms = 0;
  for (const auto& a : job.attempts) {
    if (a.started_ms <= 0) continue;
    if (first_start == 0) first_start = a.started_ms;
    const int64_t end = a.ended_ms > 0 ? a.ended_ms : job_end;
    gpu_ms += double(a.world_size()) * double(std::max<int64_t>(0, end - a.started_ms));
  }
  info->elapsed_ms = first_start > 0 ? std::max<int64_t>(0, job_end - first_start) : 0;
  info->gpu_hours = gpu_ms / 3.6e6;
  const auto latest = job.training.latest();
  if (job.state != JobState::kRunning || job.control.kind != jobs::JobKind::kTrain || !latest) return;
  TrainingProgress& p = info->progress;
  p.step = latest->step;
  p.total_steps = job.total_steps;
  if (latest->has(Figure::kLoss)) p.loss = latest->get(Figure::kLoss);
  if (latest->has(Figure::kTokensPerSecond)) p.tokens_per_s = latest->get(Figure::kTokensPerSecond);
  // Row times come from the worker's host; a clock ahead of ours reads as fresh.
  p.age_ms = std::max<int64_t>(0, now_ms - int64_t(latest->time * 1000));
  if (job.eta_s >= 0) p.eta_s = std::max(0.0, job.eta_s - double(p.age_ms) / 1000);
  info->has_progress = true;
}

}  // namespace

void CoordinatorImpl::on_submit(const std::string& peer, const Envelope& e) {
  COHORT_PARSE_OR_REPLY(SubmitJob, m);
  auto control = job_control_from_toml(m.job_toml);
  Status admitted = control ? check_job_control(*control) : control.status();
  if (!admitted) {
    warn_bad_input("refused a job: " + admitted.message());
    return reply_error(peer, e.id, admitted);
  }
  const JobControl& c = *control;
  size_t active = 0;
  for (const auto& [id, job] : jobs_) active += is_terminal(job.state) ? 0 : 1;
  if (active >= kMaxActiveJobs) {
    return reply_error(peer, e.id, failed_precondition(std::to_string(active) +
                                                          " jobs are queued or running; at most " +
                                                          std::to_string(kMaxActiveJobs)));
  }
  for (const auto& d : c.depends_on) {
    if (!state_of_job(d.job_id).empty()) continue;
    Status refused = not_found("job.depends_on: no job " + d.job_id + " (see `cohort jobs`)");
    warn_bad_input("refused a job: " + refused.message());
    return reply_error(peer, e.id, refused);
  }
  if (const Job* holder = live_job_writing(c.output_dir)) {
    Status refused = failed_precondition(
        "output_dir " + c.output_dir + " is in use by " + holder->id + " (" + holder->control.name + ", " +
        to_string(holder->state) + "); two jobs writing one folder interleave their checkpoints and metrics. "
        "Wait for " + holder->id + " to end, `cohort cancel " + holder->id + "`, or set job.output_dir "
        "(--set job.output_dir=...)");
    warn_bad_input("refused a job: " + refused.message());
    return reply_error(peer, e.id, refused);
  }
  // The submitting client key owns the job; its limits hold (key_limits.h).
  const std::string key = router_->current_key();
  const std::string owner = owner_of_key(key, options_.security);
  if (Status s = admit_for_key(owner, limits_of(key), usage_of(key), c.nodes_min * c.gpus_per_node); !s) {
    spdlog::info("refused a job of {}: {}", describe_owner(owner), s.message());
    return reply_error(peer, e.id, s);
  }
  Job job;
  job.seq = next_seq_++;
  job.id = "job-" + std::to_string(job.seq);
  job.job_toml = m.job_toml;
  job.control = c;
  job.owner_key = key;
  job.owner = owner;
  job.submitted_ms = unix_ms_now();
  job.queued_since = clock_.now();
  job.add_event("submitted");
  std::string id = job.id;
  // Acknowledged only once durable: a job the database did not take is
  // refused, not reported as submitted and then lost.
  if (Status s = save_job(job); !s) {
    return reply_error(peer, e.id, unavailable("the job was not submitted: cannot save it (" +
                                                   s.message() + ")"));
  }
  spdlog::info("job {} ({}) submitted{}: {} node(s) x {} GPU(s)", id, c.name,
               owner.empty() ? "" : " by " + describe_owner(owner),
               c.nodes_min == c.nodes_max ? std::to_string(c.nodes_min)
                                          : std::to_string(c.nodes_min) + ":" + std::to_string(c.nodes_max),
               c.gpus_per_node);
  jobs_.emplace(id, std::move(job));
  reply(peer, e.id, SubmitReply{id});
  schedule();
}

const Job* CoordinatorImpl::live_job_writing(const std::string& output_dir) const {
  // Resolved files hold absolute paths; "runs/x/" and "runs/x" are one folder.
  auto folder = [](const std::string& dir) {
    std::string normal = std::filesystem::path(dir).lexically_normal().string();
    while (normal.size() > 1 && normal.back() == '/') normal.pop_back();
    return normal;
  };
  const std::string wanted = folder(output_dir);
  for (const auto& [id, job] : jobs_) {
    if (!is_terminal(job.state) && folder(job.control.output_dir) == wanted) return &job;
  }
  return nullptr;
}

Job* CoordinatorImpl::find_job(const std::string& id_or_name) {
  auto it = jobs_.find(id_or_name);
  if (it != jobs_.end()) return &it->second;
  Job* latest = nullptr;  // by name: the most recent job of that name
  for (auto& [id, job] : jobs_) {
    if (job.control.name == id_or_name && (!latest || job.seq > latest->seq)) latest = &job;
  }
  return latest;
}

void CoordinatorImpl::on_job_query(const std::string& peer, const Envelope& e) {
  COHORT_PARSE_OR_REPLY(JobQuery, m);
  JobList list;
  if (!m.job_id.empty()) {
    Job* job = find_job(m.job_id);
    if (!job) return reply_error(peer, e.id, missing_job(m.job_id));
    list.jobs.push_back(job->info());
    add_usage(*job, unix_ms_now(), &list.jobs.back());
    list.total = 1;
    return reply(peer, e.id, list);
  }
  // The newest jobs that match, as many as `limit` and the byte cap allow,
  // sent oldest first. The list leaves out event histories (`cohort status
  // JOB` has them).
  std::vector<const Job*> ordered;
  for (const auto& [id, job] : jobs_) {
    if (m.state.empty() || m.state == to_string(job.state)) ordered.push_back(&job);
  }
  std::sort(ordered.begin(), ordered.end(), [](auto* a, auto* b) { return a->seq > b->seq; });
  list.total = int(ordered.size());
  size_t bytes = 0;
  const int64_t now_ms = unix_ms_now();
  for (const Job* job : ordered) {
    if (m.limit > 0 && int(list.jobs.size()) >= m.limit) break;
    JobInfo info = job->info();
    info.events.clear();
    add_usage(*job, now_ms, &info);
    size_t size = encoded_size(info);
    if (bytes + size > kMaxReplyBytes) break;
    bytes += size;
    list.jobs.push_back(std::move(info));
  }
  list.more = int(list.jobs.size()) < list.total;
  std::reverse(list.jobs.begin(), list.jobs.end());
  reply(peer, e.id, list);
}

std::vector<NodeInfo> CoordinatorImpl::node_infos() const {
  std::vector<NodeInfo> out;
  auto free = capacity();
  size_t bytes = 0;
  for (const Node* n : registry_.nodes()) {
    NodeInfo info;
    info.name = n->name;
    info.address = n->address;
    info.state = to_string(n->state);
    info.gpus = n->gpus;
    if (auto s = gpu_samples_.find(n->name); s != gpu_samples_.end() && is_connected(n->state)) {
      info.gpu_samples = s->second;
    }
    for (const auto& c : free) {
      if (c.name == n->name) info.gpus_free = int(c.free_gpus.size());
    }
    info.heartbeat_age_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(clock_.now() - n->last_heartbeat).count();
    info.jobs = jobs_on(n->name);
    info.drain_reason = n->drain_reason;
    // A drained node with nothing left on it is done draining.
    if (n->state == NodeState::kDraining && !n->leaving && info.jobs.empty()) info.state = "drained";
    // Registrations are capped, so this only bites with thousands of nodes.
    bytes += encoded_size(info);
    if (bytes > kMaxReplyBytes) break;
    out.push_back(std::move(info));
  }
  return out;
}

void CoordinatorImpl::on_node_query(const std::string& peer, const Envelope& e) {
  reply(peer, e.id, NodeList{node_infos()});
}

Status CoordinatorImpl::cancel_job(const std::string& id_or_name, std::string* text) {
  Job* job = find_job(id_or_name);
  if (!job) return missing_job(id_or_name);
  if (is_terminal(job->state)) {
    *text = "job " + job->id + " already " + to_string(job->state);
    return Status::ok();
  }
  job->cancel_requested = true;
  job->add_event("cancel requested");
  if (job->state == JobState::kQueued) {
    end_job(*job, JobState::kCancelled, "cancelled while queued");
  } else if (job->current() && job->current()->state == AttemptState::kRunning) {
    begin_stop(*job, StopIntent::kCancel, "cancelled");
  } else {
    persist(*job);  // a stop is already under way; finish_attempt sees the request
  }
  *text = "cancelling " + job->id;
  return Status::ok();
}

void CoordinatorImpl::on_cancel(const std::string& peer, const Envelope& e) {
  COHORT_PARSE_OR_REPLY(CancelJob, m);
  std::string text;
  Status s = cancel_job(m.job_id, &text);
  if (!s) return reply_error(peer, e.id, s);
  reply(peer, e.id, Ack{text});
}

void CoordinatorImpl::on_log_query(const std::string& peer, const Envelope& e) {
  COHORT_PARSE_OR_REPLY(LogQuery, m);
  Job* job = find_job(m.job_id);
  if (!job) return reply_error(peer, e.id, missing_job(m.job_id));
  LogQuery query = m;
  query.job_id = job->id;
  LogReply out;
  if (query.tail > 0) {
    out.lines = logs_.newest(query, size_t(std::min(query.tail, 100000)), &out.last_seq);
  } else {
    out.lines = logs_.read(query, &out.last_seq);
  }
  out.note = logs_note(*job, query);
  out.job_finished = is_terminal(job->state);
  out.job_state = to_string(job->state);
  reply(peer, e.id, out);
}

std::string CoordinatorImpl::logs_note(const Job& job, const LogQuery& query) const {
  // Only a read from the start misses lines; a follow-up read resumes.
  if (query.after_seq > 0 || job.attempts.empty()) return "";
  uint64_t received = logs_.lines_received(job.id), dropped = logs_.lines_dropped(job.id);
  if (received > 0 && dropped == 0) return "";
  int attempt = query.attempt >= 0 && query.attempt < int(job.attempts.size()) ? query.attempt
                                                                                : int(job.attempts.size()) - 1;
  const Attempt& a = job.attempts[size_t(attempt)];
  // Where each rank's file is: rank ranges per node, the first few nodes.
  std::string where;
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    if (i == 8) {
      where += ", and " + std::to_string(a.nodes.size() - 8) + " more node(s)";
      break;
    }
    int first = int(i) * a.gpus_per_node, last = first + a.gpus_per_node - 1;
    where += (i ? ", " : "") + a.nodes[i] + " (rank" + (first == last ? " " + std::to_string(first)
                                                                     : "s " + std::to_string(first) + "-" +
                                                                           std::to_string(last)) + ")";
  }
  std::string files = "the complete logs are the per-rank files " + job.control.output_dir + "/logs/attempt-" +
                      std::to_string(attempt) + "/rank-<R>.log on each rank's node: " + where;
  if (received == 0) return "no output of job " + job.id + " has reached the coordinator; " + files;
  return std::to_string(dropped) + " older line(s) are no longer kept by the coordinator (it keeps the last " +
         std::to_string(options_.log_bytes_per_job >> 20) + " MiB of each job); " + files;
}

void CoordinatorImpl::on_remove_job(const std::string& peer, const Envelope& e) {
  COHORT_PARSE_OR_REPLY(RemoveJob, m);
  Job* job = find_job(m.job_id);
  if (!job) {
    // A retired job is only in the database (and retired_): remove it there.
    auto it = std::find_if(retired_.begin(), retired_.end(), [&](const RetiredJob& r) { return r.id == m.job_id; });
    if (it == retired_.end()) return reply_error(peer, e.id, missing_job(m.job_id));
    if (db_) {
      if (auto s = db_->remove_job(it->id); !s) return reply_error(peer, e.id, s);
    }
    std::string id = it->id;
    retired_.erase(it);
    spdlog::info("job {} removed (it had been retired from memory)", id);
    return reply(peer, e.id, Ack{"removed " + id});
  }
  if (!is_terminal(job->state)) {
    return reply_error(peer, e.id, failed_precondition("job " + job->id + " is " + to_string(job->state) +
                                                           "; cancel it first (`cohort cancel " + job->id + "`)"));
  }
  std::string id = job->id;
  if (db_) {
    if (auto s = db_->remove_job(id); !s) return reply_error(peer, e.id, s);
  }
  forget_logs(id);
  jobs_.erase(id);
  spdlog::info("job {} removed", id);
  reply(peer, e.id, Ack{"removed " + id});
}

void CoordinatorImpl::on_remove_node(const std::string& peer, const Envelope& e) {
  COHORT_PARSE_OR_REPLY(RemoveNode, m);
  const Node* n = registry_.find(m.node);
  if (!n) return reply_error(peer, e.id, not_found("no node '" + shorten(m.node, 64) + "'"));
  if (is_connected(n->state)) {
    return reply_error(peer, e.id, failed_precondition("node " + m.node + " is " + to_string(n->state) +
                                                           "; stop its agent first (a lost or left node can be removed)"));
  }
  if (auto running = jobs_on(m.node); !running.empty()) {
    return reply_error(peer, e.id, failed_precondition("node " + m.node + " still has job " + running.front() + " stopping"));
  }
  if (db_) {
    if (auto s = db_->remove_node(m.node); !s) return reply_error(peer, e.id, s);
  }
  registry_.remove(m.node);
  node_keys_.erase(m.node);  // its name may be registered by another agent key now
  log_batches_seen_.erase(m.node);
  spdlog::info("node {} removed", m.node);
  reply(peer, e.id, Ack{"removed " + m.node});
}

void CoordinatorImpl::retire_finished_jobs() {
  std::vector<const Job*> finished;
  int64_t now = unix_ms_now();
  for (const auto& [id, job] : jobs_) {
    if (is_terminal(job.state)) finished.push_back(&job);
  }
  std::sort(finished.begin(), finished.end(), [](auto* a, auto* b) { return a->seq > b->seq; });
  std::vector<std::string> retire;
  for (size_t i = 0; i < finished.size(); ++i) {
    bool old = finished[i]->ended_ms > 0 &&
               now - finished[i]->ended_ms > options_.finished_retention.count();
    if (i >= options_.max_finished_jobs || old) retire.push_back(finished[i]->id);
  }
  for (const auto& id : retire) {
    const Job& job = jobs_.at(id);
    retired_.push_back({job.id, job.control.name, to_string(job.state), job.ended_ms, now});
    if (retired_.size() > kMaxRetiredJobs) retired_.pop_front();
    forget_logs(id);
    jobs_.erase(id);
  }
  if (!retire.empty()) spdlog::debug("{} finished job(s) left memory (kept in the state database)", retire.size());
}

Status CoordinatorImpl::missing_job(const std::string& id_or_name) const {
  // By id, else the newest of that name, as find_job does.
  const RetiredJob* found = nullptr;
  for (auto it = retired_.rbegin(); it != retired_.rend() && !found; ++it) {
    if (it->id == id_or_name) found = &*it;
  }
  for (auto it = retired_.rbegin(); it != retired_.rend() && !found; ++it) {
    if (it->name == id_or_name) found = &*it;
  }
  if (!found) return not_found("no job '" + shorten(id_or_name, 64) + "'");
  std::string ended = found->ended_ms > 0 ? " at " + html::clock(found->ended_ms) + " UTC" : "";
  return not_found(fmt::format(
      "job {} ({}) finished ({}{}) and was retired from the coordinator's memory at {} UTC: finished jobs "
      "stay {} and at most {} of them. Its logs are gone{}",
      found->id, shorten(found->name, 64), found->state, ended, html::clock(found->retired_ms),
      html::duration(options_.finished_retention.count()), options_.max_finished_jobs,
      db_ ? "; its record is in the state database (`cohort jobs rm " + found->id + "` deletes it)" : ""));
}

}  // namespace cohort::coordinator
