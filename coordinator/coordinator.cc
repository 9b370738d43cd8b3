// The coordinator's message handling: decoding, dispatch, nodes, queries,
// the store and logs. Job lifecycle decisions live in job_lifecycle.cc.
#include "coordinator/coordinator_impl.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace cohort::coordinator {

using namespace protocol;

CoordinatorImpl::CoordinatorImpl(boost::asio::io_context& io, CoordinatorOptions options)
    : io_(io),
      options_(std::move(options)),
      clock_(options_.clock ? *options_.clock : SystemClock::instance()),
      registry_(clock_, options_.heartbeat_timeout),
      store_(clock_, options_.store_timeout),
      timer_(io) {
  if (options_.recovery_grace.count() == 0) options_.recovery_grace = 2 * options_.heartbeat_timeout;
}

Status CoordinatorImpl::open() {
  COHORT_RETURN_IF_ERROR(
      check_bind_allowed(options_.listen, options_.security, options_.insecure));
  if (!is_loopback_endpoint(options_.listen) && !options_.security.enabled) {
    spdlog::warn("listening on {} WITHOUT authentication (--insecure): anyone who can reach "
                 "this address can run programs on every node",
                 options_.listen);
  }
  if (!options_.state_dir.empty()) {
    COHORT_ASSIGN_OR_RETURN(db_, StateDb::open(options_.state_dir));
    COHORT_RETURN_IF_ERROR(recover_from_db());
  }
  auto context = options_.zmq_context ? options_.zmq_context : make_zmq_context();
  COHORT_ASSIGN_OR_RETURN(
      router_, RouterEndpoint::bind(io_, context, options_.listen, options_.security,
                                    [this](const std::string& peer, std::string payload) {
                                      on_message(peer, std::move(payload));
                                    }));
  spdlog::info("coordinator listening on {}{}", router_->endpoint(),
               options_.security.enabled ? " (CURVE)" : "");
  if (!options_.http_listen.empty()) {
    HttpSources sources{[this] { return jobs(); }, [this] { return node_infos(); },
                        [this](const std::string& id) {
                          std::string text;
                          return cancel_job(id, &text);
                        }};
    COHORT_ASSIGN_OR_RETURN(http_, HttpApi::start(io_, options_.http_listen, std::move(sources),
                                                  options_.http_token));
  }
  arm_tick();
  return Status::ok();
}

Result<std::unique_ptr<Coordinator>> Coordinator::start(boost::asio::io_context& io,
                                                        CoordinatorOptions options) {
  auto impl = std::make_unique<CoordinatorImpl>(io, std::move(options));
  COHORT_RETURN_IF_ERROR(impl->open());
  return std::unique_ptr<Coordinator>(std::move(impl));
}

std::vector<JobInfo> CoordinatorImpl::jobs() const {
  std::vector<const Job*> ordered;
  for (const auto& [id, job] : jobs_) ordered.push_back(&job);
  std::sort(ordered.begin(), ordered.end(), [](auto* a, auto* b) { return a->seq < b->seq; });
  std::vector<JobInfo> out;
  for (const Job* job : ordered) out.push_back(job->info());
  return out;
}

void CoordinatorImpl::on_message(const std::string& peer, std::string payload) {
  auto envelope = decode(payload);
  if (!envelope) {
    spdlog::warn("bad message from a peer ({} bytes): {}", payload.size(),
                 envelope.status().message());
    reply_error(peer, 0, envelope.status());
    return;
  }
  dispatch(peer, *envelope);
}

void CoordinatorImpl::dispatch(const std::string& peer, const Envelope& e) {
  using Handler = void (CoordinatorImpl::*)(const std::string&, const Envelope&);
  static const std::map<std::string, Handler> kHandlers = {
      {RegisterNode::kType, &CoordinatorImpl::on_register},
      {Heartbeat::kType, &CoordinatorImpl::on_heartbeat},
      {WorkerExit::kType, &CoordinatorImpl::on_worker_exit},
      {LogBatch::kType, &CoordinatorImpl::on_log_batch},
      {SubmitJob::kType, &CoordinatorImpl::on_submit},
      {JobQuery::kType, &CoordinatorImpl::on_job_query},
      {NodeQuery::kType, &CoordinatorImpl::on_node_query},
      {CancelJob::kType, &CoordinatorImpl::on_cancel},
      {LogQuery::kType, &CoordinatorImpl::on_log_query},
      {StoreRequest::kType, &CoordinatorImpl::on_store},
  };
  auto it = kHandlers.find(e.type);
  if (it == kHandlers.end()) {
    spdlog::warn("unknown message type '{}' from a peer", e.type);
    reply_error(peer, e.id, invalid_argument("unknown message type '" + e.type + "'"));
    return;
  }
  (this->*(it->second))(peer, e);
}

void CoordinatorImpl::reply_error(const std::string& peer, uint64_t id, const Status& status) {
  send_payload(peer, encode_error(status, id));
}

void CoordinatorImpl::send_payload(const std::string& peer, const std::string& payload) {
  if (auto s = router_->send(peer, payload); !s) spdlog::debug("reply dropped: {}", s.message());
}

template <typename T>
bool CoordinatorImpl::send_to_node(const std::string& node, const T& message) {
  const Node* n = registry_.find(node);
  if (!n || n->state != NodeState::kAlive) return false;
  auto s = router_->send(n->peer, encode(message));
  if (!s) spdlog::warn("cannot send '{}' to node {}: {}", T::kType, node, s.message());
  return s.is_ok();
}
template bool CoordinatorImpl::send_to_node(const std::string&, const LaunchOrder&);
template bool CoordinatorImpl::send_to_node(const std::string&, const StopOrder&);

// Every handler parses its body first; a bad body is answered, not fatal.
#define COHORT_PARSE_OR_REPLY(Type, var)              \
  auto var##_result = body_as<Type>(e);               \
  if (!var##_result) {                                \
    spdlog::warn("{}", var##_result.status().message()); \
    reply_error(peer, e.id, var##_result.status());   \
    return;                                           \
  }                                                   \
  const Type& var = *var##_result

void CoordinatorImpl::on_register(const std::string& peer, const Envelope& e) {
  COHORT_PARSE_OR_REPLY(RegisterNode, m);
  if (m.node.empty()) return reply_error(peer, e.id, invalid_argument("register: empty node name"));
  const Node* before = registry_.find(m.node);
  bool returning = before && before->state == NodeState::kLost;
  registry_.register_node(m, peer);
  spdlog::info("node {} {} ({} GPUs, {} running workers)", m.node,
               returning ? "re-registered" : "registered", m.gpus.size(), m.running.size());
  if (db_) {
    if (auto s = db_->save_node(m.node, m.address, m.gpus); !s) spdlog::error("{}", s.message());
  }
  RegisterAck ack;
  ack.heartbeat_interval_ms = options_.heartbeat_interval.count();
  reply(peer, e.id, ack);
  for (const auto& w : m.running) reconcile_worker(m.node, w);
  check_recovery();
  schedule();
  maybe_scale_up();
}

void CoordinatorImpl::on_heartbeat(const std::string& peer, const Envelope& e) {
  COHORT_PARSE_OR_REPLY(Heartbeat, m);
  if (!registry_.heartbeat(m.node, peer)) {
    // Unknown (a restarted coordinator) or lost: the agent must register again.
    reply(peer, e.id, ErrorReply{"unknown_node", "node " + m.node + " must register again"});
    return;
  }
  for (const auto& w : m.running) reconcile_worker(m.node, w);
  reconcile_missing(m.node, m.running);
  check_recovery();
}

void CoordinatorImpl::on_worker_exit(const std::string& peer, const Envelope& e) {
  COHORT_PARSE_OR_REPLY(WorkerExit, m);
  reply(peer, e.id, Ack{});
  auto it = jobs_.find(m.job_id);
  if (it == jobs_.end()) return;
  Job& job = it->second;
  Attempt* a = job.current();
  if (!a || a->number != m.attempt || !a->active()) return;  // a stale report
  if (m.rank < 0 || m.rank >= a->world_size() || a->ranks[m.rank].node != m.node) {
    spdlog::warn("worker_exit for job {} rank {} from node {} does not match the attempt",
                 m.job_id, m.rank, m.node);
    return;
  }
  rank_exited(job, m.rank, m);
}

void CoordinatorImpl::on_log_batch(const std::string&, const Envelope& e) {
  auto m = body_as<LogBatch>(e);
  if (!m) return spdlog::warn("{}", m.status().message());
  if (!jobs_.count(m->job_id)) return;
  logs_.append(m->job_id, std::move(m->lines));
}

void CoordinatorImpl::on_submit(const std::string& peer, const Envelope& e) {
  COHORT_PARSE_OR_REPLY(SubmitJob, m);
  const JobControl& c = m.job;
  std::string problem;
  if (c.nodes_min < 1 || c.nodes_max < c.nodes_min) problem = "job.nodes must be N or MIN:MAX with 1 <= MIN <= MAX";
  else if (c.gpus_per_node < 1) problem = "job.gpus_per_node must be at least 1";
  else if (c.max_restarts < 0) problem = "job.max_restarts must not be negative";
  else if (c.kind != "command" && c.kind != "train" && c.kind != "infer" && c.kind != "serve")
    problem = "job.kind must be train, infer, serve or command";
  else if (c.kind == "command" && c.argv.empty()) problem = "a command job needs command.argv";
  else if (c.devices != "own" && c.devices != "node") problem = "job.devices must be own or node";
  else if (c.output_dir.empty()) problem = "job.output_dir is empty";
  if (!problem.empty()) return reply_error(peer, e.id, invalid_argument(problem));
  Job job;
  job.seq = next_seq_++;
  job.id = "job-" + std::to_string(job.seq);
  job.control = c;
  job.submitted_ms = unix_ms_now();
  job.queued_since = clock_.now();
  job.add_event("submitted");
  std::string id = job.id;
  spdlog::info("job {} ({}) submitted: {} node(s) x {} GPU(s)", id, c.name,
               c.nodes_min == c.nodes_max ? std::to_string(c.nodes_min)
                                          : std::to_string(c.nodes_min) + ":" + std::to_string(c.nodes_max),
               c.gpus_per_node);
  jobs_.emplace(id, std::move(job));
  persist(jobs_.at(id));
  reply(peer, e.id, SubmitReply{id});
  schedule();
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
  if (m.job_id.empty()) {
    // The list leaves out event histories (`cohort status JOB` has them), so
    // a long-lived coordinator's reply stays far below the message cap.
    list.jobs = jobs();
    for (auto& j : list.jobs) j.events.clear();
  } else {
    Job* job = find_job(m.job_id);
    if (!job) return reply_error(peer, e.id, not_found("no job '" + m.job_id + "'"));
    list.jobs.push_back(job->info());
  }
  reply(peer, e.id, list);
}

std::vector<NodeInfo> CoordinatorImpl::node_infos() const {
  std::vector<NodeInfo> out;
  auto free = capacity();
  for (const Node* n : registry_.nodes()) {
    NodeInfo info;
    info.name = n->name;
    info.address = n->address;
    info.state = to_string(n->state);
    info.gpus = n->gpus;
    for (const auto& c : free) {
      if (c.name == n->name) info.gpus_free = int(c.free_gpus.size());
    }
    info.heartbeat_age_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(clock_.now() - n->last_heartbeat).count();
    for (const auto& [id, job] : jobs_) {
      if (!job.attempts.empty() && job.attempts.back().active() &&
          job.attempts.back().gpus.count(n->name)) {
        info.jobs.push_back(id);
      }
    }
    out.push_back(std::move(info));
  }
  return out;
}

void CoordinatorImpl::on_node_query(const std::string& peer, const Envelope& e) {
  reply(peer, e.id, NodeList{node_infos()});
}

Status CoordinatorImpl::cancel_job(const std::string& id_or_name, std::string* text) {
  Job* job = find_job(id_or_name);
  if (!job) return not_found("no job '" + id_or_name + "'");
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
  if (!job) return reply_error(peer, e.id, not_found("no job '" + m.job_id + "'"));
  LogQuery query = m;
  query.job_id = job->id;
  LogReply out;
  out.lines = logs_.read(query, &out.last_seq);
  out.job_finished = is_terminal(job->state);
  out.job_state = to_string(job->state);
  reply(peer, e.id, out);
}

void CoordinatorImpl::on_store(const std::string& peer, const Envelope& e) {
  COHORT_PARSE_OR_REPLY(StoreRequest, m);
  uint64_t id = e.id;
  // Only a live attempt has a namespace: a straggler of an ended attempt
  // must neither read the new one's keys nor leave keys nobody drops.
  auto job = jobs_.find(m.job_id);
  const Attempt* attempt = job == jobs_.end() ? nullptr : job->second.current();
  if (!attempt || attempt->number != m.attempt || !attempt->active()) {
    return reply_error(peer, id, aborted("job " + m.job_id + " attempt " + std::to_string(m.attempt) +
                                             " is not running"));
  }
  // The reply may come later (a blocking get); by then this peer may be gone,
  // which send_payload tolerates.
  store_.handle(m, [this, peer, id](Result<StoreReply> result) {
    if (!result) return reply_error(peer, id, result.status());
    reply(peer, id, *result);
  });
}

void CoordinatorImpl::arm_tick() {
  timer_.expires_after(options_.tick_interval);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    tick();
    arm_tick();
  });
}

void CoordinatorImpl::tick() {
  for (const auto& node : registry_.expire()) on_node_lost(node);
  store_.expire();
  check_recovery();
  schedule();
}

}  // namespace cohort::coordinator
