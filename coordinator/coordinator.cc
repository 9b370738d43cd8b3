// The coordinator's message handling: decoding, dispatch, nodes, queries,
// the store and logs. Job lifecycle decisions live in job_placement.cc and
// job_lifecycle.cc.
#include "coordinator/coordinator_impl.h"

#include <malloc.h>

#include <algorithm>

#include <spdlog/spdlog.h>

#include "coordinator/admission.h"
#include "coordinator/open_files_limit.h"
#include "protocol/limits.h"

namespace cohort::coordinator {

using namespace protocol;

CoordinatorImpl::CoordinatorImpl(boost::asio::io_context& io, CoordinatorOptions options)
    : io_(io),
      options_(std::move(options)),
      clock_(options_.clock ? *options_.clock : SystemClock::instance()),
      registry_(clock_, options_.heartbeat_timeout),
      store_(clock_, options_.store_timeout),
      logs_(options_.log_bytes_per_job, options_.log_bytes_total),
      timer_(io) {
  if (options_.recovery_grace.count() == 0) options_.recovery_grace = 2 * options_.heartbeat_timeout;
  if (options_.consequence_window.count() == 0) {
    options_.consequence_window = options_.heartbeat_timeout + 2 * options_.heartbeat_interval;
  }
}

namespace {

// Every connected agent and client costs the coordinator descriptors; a
// soft limit of 1,024 would stop a large cluster at "Too many open files".
void log_open_files_limit() {
  auto limit = raise_open_files_limit();
  if (!limit) {
    spdlog::warn("open files: could not raise the soft limit: {}", limit.status().message());
    return;
  }
  std::string hard = limit->hard == UINT64_MAX ? "unlimited" : std::to_string(limit->hard);
  if (limit->after > limit->before) {
    spdlog::info("open files: soft limit raised from {} to {} (hard limit {})", limit->before,
                 limit->after, hard);
  } else {
    spdlog::info("open files: soft limit {} (hard limit {})", limit->after, hard);
  }
}

}  // namespace

Status CoordinatorImpl::open() {
  COHORT_RETURN_IF_ERROR(
      check_bind_allowed(options_.listen, options_.security, options_.insecure));
  log_open_files_limit();
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
                                    [this](const std::string& peer, std::string payload, Role role) {
                                      on_message(peer, std::move(payload), role);
                                    }));
  spdlog::info("coordinator listening on {}{}", router_->endpoint(),
               options_.security.enabled ? " (CURVE)" : "");
  if (!options_.http_listen.empty()) {
    if (options_.http_token.empty() && !is_loopback_endpoint("tcp://" + options_.http_listen)) {
      return permission_denied("refusing to serve HTTP on " + options_.http_listen +
                               " without a token: give --http-token, or bind --http to 127.0.0.1");
    }
    COHORT_ASSIGN_OR_RETURN(http_, HttpApi::start(io_, options_.http_listen, http_sources(),
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

void CoordinatorImpl::on_message(const std::string& peer, std::string payload, Role role) {
  auto envelope = decode(payload);
  if (!envelope) {
    warn_bad_input("bad message from a peer (" + std::to_string(payload.size()) +
                   " bytes): " + envelope.status().message());
    reply_error(peer, 0, envelope.status());
    return;
  }
  role_ = role;
  dispatch(peer, *envelope);
}

void CoordinatorImpl::dispatch(const std::string& peer, const Envelope& e) {
  using Handler = void (CoordinatorImpl::*)(const std::string&, const Envelope&);
  // Which role may send what: an agent key reports for its node, a client
  // key submits and manages jobs; both may ask. Without CURVE every peer is
  // a trusted local user (kTrusted) and may send anything.
  enum class From { kAgent, kClient, kAny };
  struct Route {
    Handler handler;
    From from;
  };
  static const std::map<std::string, Route> kHandlers = {
      {RegisterNode::kType, {&CoordinatorImpl::on_register, From::kAgent}},
      {Heartbeat::kType, {&CoordinatorImpl::on_heartbeat, From::kAgent}},
      {WorkerExit::kType, {&CoordinatorImpl::on_worker_exit, From::kAgent}},
      {LogBatch::kType, {&CoordinatorImpl::on_log_batch, From::kAgent}},
      {WorkersStarted::kType, {&CoordinatorImpl::on_workers_started, From::kAgent}},
      {MetricBatch::kType, {&CoordinatorImpl::on_metric_batch, From::kAgent}},
      {GpuReport::kType, {&CoordinatorImpl::on_gpu_report, From::kAgent}},
      {NodeLeaving::kType, {&CoordinatorImpl::on_node_leaving, From::kAgent}},
      {NodeLeft::kType, {&CoordinatorImpl::on_node_left, From::kAgent}},
      {StoreRequest::kType, {&CoordinatorImpl::on_store, From::kAgent}},
      {SubmitJob::kType, {&CoordinatorImpl::on_submit, From::kClient}},
      {CancelJob::kType, {&CoordinatorImpl::on_cancel, From::kClient}},
      {RemoveJob::kType, {&CoordinatorImpl::on_remove_job, From::kClient}},
      {RemoveNode::kType, {&CoordinatorImpl::on_remove_node, From::kClient}},
      {DrainNode::kType, {&CoordinatorImpl::on_drain, From::kClient}},
      {UndrainNode::kType, {&CoordinatorImpl::on_undrain, From::kClient}},
      {JobQuery::kType, {&CoordinatorImpl::on_job_query, From::kAny}},
      {NodeQuery::kType, {&CoordinatorImpl::on_node_query, From::kAny}},
      {LogQuery::kType, {&CoordinatorImpl::on_log_query, From::kAny}},
  };
  auto it = kHandlers.find(e.type);
  if (it == kHandlers.end()) {
    warn_bad_input("unknown message type '" + shorten(e.type, 64) + "' from a peer");
    reply_error(peer, e.id, invalid_argument("unknown message type '" + shorten(e.type, 64) + "'"));
    return;
  }
  From from = it->second.from;
  bool allowed = role_ == Role::kTrusted || from == From::kAny ||
                 (from == From::kAgent && role_ == Role::kAgent) ||
                 (from == From::kClient && role_ == Role::kClient);
  if (!allowed) {
    warn_bad_input(std::string("refused '") + e.type + "' from a peer with a " + to_string(role_) + " key");
    return reply_error(peer, e.id,
                       permission_denied(std::string("'") + e.type + "' needs " +
                                         (from == From::kAgent ? "an agent" : "a client") +
                                         " key; this connection holds a " + to_string(role_) + " key"));
  }
  (this->*(it->second.handler))(peer, e);
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
  if (!n || !is_connected(n->state)) return false;
  auto s = router_->send(n->peer, encode(message));
  if (!s) spdlog::warn("cannot send '{}' to node {}: {}", T::kType, node, s.message());
  return s.is_ok();
}
template bool CoordinatorImpl::send_to_node(const std::string&, const LaunchOrder&);
template bool CoordinatorImpl::send_to_node(const std::string&, const StopOrder&);

const Node* CoordinatorImpl::node_of_peer(const std::string& peer) const {
  for (const Node* n : registry_.nodes()) {
    if (n->peer == peer && is_connected(n->state)) return n;
  }
  return nullptr;
}

void CoordinatorImpl::on_register(const std::string& peer, const Envelope& e) {
  COHORT_PARSE_OR_REPLY(RegisterNode, m);
  if (auto s = check_registration(m); !s) {
    warn_bad_input(s.message());
    return reply_error(peer, e.id, s);
  }
  if (auto s = check_node_key(m.node); !s) {
    warn_bad_input(s.message());
    return reply_error(peer, e.id, s);
  }
  const Node* before = registry_.find(m.node);
  // A node is bound to the connection that registered it while it is alive:
  // anyone else claiming its name (a hijack, or its own agent restarted) is
  // refused until the old connection has been silent for heartbeat_timeout.
  if (before && is_connected(before->state) && before->peer != peer) {
    warn_bad_input("refused a registration as node " + m.node + " from another connection");
    return reply(peer, e.id, ErrorReply{"node_taken", "node " + m.node +
                                                          " is registered from another connection; "
                                                          "it can be taken over once that one is lost"});
  }
  if (const Node* mine = node_of_peer(peer); mine && mine->name != m.node) {
    return reply_error(peer, e.id, failed_precondition("this connection is node " + mine->name +
                                                           "; one connection registers one node"));
  }
  if (!before && registry_.nodes().size() >= kMaxNodes) {
    return reply_error(peer, e.id, failed_precondition("the coordinator knows " + std::to_string(kMaxNodes) +
                                                          " nodes already; remove lost ones with `cohort nodes rm`"));
  }
  bool returning = before && !is_connected(before->state);
  if (!before || before->peer != peer) log_batches_seen_.erase(m.node);  // a new agent numbers from 1
  registry_.register_node(m, peer);
  bind_node_key(m.node);
  spdlog::info("node {} {} ({} GPUs, {} running workers)", m.node,
               returning ? "re-registered" : "registered", m.gpus.size(), m.running.size());
  save_node(m.node);
  if (!m.fenced.empty()) note_fencing(m);
  RegisterAck ack;
  ack.heartbeat_interval_ms = options_.heartbeat_interval.count();
  using std::chrono::duration_cast, std::chrono::milliseconds;
  ack.heartbeat_timeout_ms = duration_cast<milliseconds>(options_.heartbeat_timeout).count();
  ack.recovery_grace_ms = duration_cast<milliseconds>(options_.recovery_grace).count();
  reply(peer, e.id, ack);
  for (const auto& w : m.running) reconcile_worker(m.node, w);
  check_recovery();
  schedule();
  maybe_scale_up();
}

Status CoordinatorImpl::check_node_key(const std::string& node) const {
  if (role_ != Role::kAgent) return Status::ok();
  const std::string& key = router_->current_key();
  const auto& restricted = options_.security.agent_node_names;
  if (auto r = restricted.find(key); r != restricted.end() &&
                                     std::find(r->second.begin(), r->second.end(), node) == r->second.end()) {
    std::string names;
    for (const auto& n : r->second) names += (names.empty() ? "" : ", ") + n;
    return permission_denied("agent key " + key + " may register only node(s) " + names +
                             " (its nodes= in authorized_agents), not " + shorten(node, 64));
  }
  if (auto b = node_keys_.find(node); b != node_keys_.end() && b->second != key) {
    return permission_denied("node name " + shorten(node, 64) + " is bound to another agent key (" + b->second +
                             "); only that key registers it, also after the node is lost. "
                             "`cohort nodes rm " + shorten(node, 64) + "` unbinds it once the node is lost");
  }
  return Status::ok();
}

void CoordinatorImpl::bind_node_key(const std::string& node) {
  if (role_ != Role::kAgent || router_->current_key().empty() || node_keys_.count(node)) return;
  node_keys_[node] = router_->current_key();
  if (db_) {
    if (auto s = db_->save_node_key(node, router_->current_key()); !s) spdlog::error("{}", s.message());
  }
  spdlog::info("node {} is bound to agent key {}", node, router_->current_key());
}

void CoordinatorImpl::on_heartbeat(const std::string& peer, const Envelope& e) {
  COHORT_PARSE_OR_REPLY(Heartbeat, m);
  if (auto s = check_running(m.running); !s) return reply_error(peer, e.id, s);
  const Node* n = registry_.find(m.node);
  if (n && is_connected(n->state) && n->peer != peer) {
    // Not the registered connection: never moves the node's peer.
    warn_bad_input("ignored a heartbeat for node " + m.node + " from another connection");
    return reply_error(peer, e.id, permission_denied("node " + m.node + " is registered from another connection"));
  }
  if (!registry_.heartbeat(m.node, peer)) {
    // Unknown (a restarted coordinator) or lost: the agent must register again.
    reply(peer, e.id, ErrorReply{"unknown_node", "node " + m.node + " must register again"});
    return;
  }
  // The answer renews the agent's fencing lease (agent/coordinator_contact.h).
  reply(peer, e.id, Ack{});
  for (const auto& w : m.running) reconcile_worker(m.node, w);
  reconcile_missing(m.node, m.running);
  check_recovery();
}

void CoordinatorImpl::note_fencing(const RegisterNode& m) {
  spdlog::warn("node {} stopped {} worker(s) on its own while cut off: {}", m.node, m.fenced.size(),
               shorten(m.fence_reason, 1024));
  std::map<std::pair<std::string, int>, std::string> ranks;  // (job, attempt) -> "2, 3"
  for (const auto& w : m.fenced) {
    auto& list = ranks[{w.job_id, w.attempt}];
    list += (list.empty() ? "" : ", ") + std::to_string(w.rank);
  }
  for (const auto& [key, list] : ranks) {
    auto it = jobs_.find(key.first);
    if (it == jobs_.end()) continue;
    it->second.add_event("node " + m.node + " stopped rank(s) " + list + " of attempt " +
                         std::to_string(key.second) + " itself: " + shorten(m.fence_reason, 1024));
    (void)save_job(it->second);
  }
}

void CoordinatorImpl::on_worker_exit(const std::string& peer, const Envelope& e) {
  COHORT_PARSE_OR_REPLY(WorkerExit, m);
  auto it = jobs_.find(m.job_id);
  if (it == jobs_.end()) return reply(peer, e.id, Ack{});
  Job& job = it->second;
  Attempt* a = job.current();
  if (!a || a->number != m.attempt || !a->active()) return reply(peer, e.id, Ack{});  // a stale report
  if (m.rank < 0 || m.rank >= a->world_size() || a->ranks[m.rank].node != m.node) {
    warn_bad_input("worker_exit for job " + m.job_id + " rank " + std::to_string(m.rank) +
                   " from node " + shorten(m.node, 64) + " does not match the attempt");
    return reply(peer, e.id, Ack{});
  }
  // Only the node that runs the rank reports its exit.
  const Node* n = registry_.find(m.node);
  if (!n || n->peer != peer) {
    warn_bad_input("refused a worker_exit for job " + m.job_id + " rank " + std::to_string(m.rank) +
                   ": not sent by node " + m.node + "'s connection");
    return reply_error(peer, e.id, permission_denied("only node " + m.node + " reports its ranks' exits"));
  }
  reply(peer, e.id, Ack{});
  WorkerExit exit = m;
  if (exit.last_lines.size() > kMaxLastLines) {
    exit.last_lines.erase(exit.last_lines.begin(), exit.last_lines.end() - kMaxLastLines);
  }
  for (auto& line : exit.last_lines) {
    if (line.size() > 1024) line = shorten(line, 1024);
  }
  exit.failure = shorten(exit.failure, 4096);
  rank_exited(job, m.rank, exit);
}

void CoordinatorImpl::on_log_batch(const std::string& peer, const Envelope& e) {
  auto m = body_as<LogBatch>(e);
  if (!m) return (void)warn_bad_input(m.status().message());
  // Lines are taken only for ranks that ran on the sender's node. Unanswered,
  // the agent sends the batch again once it has registered.
  const Node* n = node_of_peer(peer);
  if (!n) return (void)warn_bad_input("log lines for job " + m->job_id + " from a connection that is no node");
  if (e.id != 0) {
    // The answer lets the agent send more (agent.cc) and forget the batch,
    // so with a state database it comes once the lines are saved: a
    // coordinator killed before that gets them again from the agent. A
    // batch sent again after a lost answer is skipped by its id.
    if (db_) {
      log_acks_due_.emplace_back(peer, e.id);
    } else {
      reply(peer, e.id, Ack{});
    }
    auto& seen = log_batches_seen_[n->name];
    bool again = std::find(seen.begin(), seen.end(), e.id) != seen.end();
    if (!again) seen.push_back(e.id);
    if (seen.size() > kLogBatchIdsKept) seen.pop_front();
    if (again) return flush_full_log_window(peer);
  }
  auto it = jobs_.find(m->job_id);
  if (it == jobs_.end()) return flush_full_log_window(peer);
  const Job& job = it->second;
  std::vector<LogLine> kept;
  kept.reserve(m->lines.size());
  for (auto& line : m->lines) {
    if (line.attempt < 0 || line.attempt >= int(job.attempts.size())) continue;
    const Attempt& a = job.attempts[line.attempt];
    if (line.rank < 0 || line.rank >= a.world_size() || a.ranks[line.rank].node != n->name) continue;
    kept.push_back(std::move(line));
  }
  if (kept.size() < m->lines.size()) {
    warn_bad_input("dropped " + std::to_string(m->lines.size() - kept.size()) + " log lines for job " +
                   m->job_id + " from node " + n->name + ": not its ranks");
  }
  if (!kept.empty()) logs_.append(m->job_id, std::move(kept));
  // A flood is written at once rather than held for the next tick.
  if (logs_.unsaved_bytes() > (4u << 20)) flush_logs();
  flush_full_log_window(peer);
}

void CoordinatorImpl::flush_full_log_window(const std::string& peer) {
  // An agent whose window is full waits for these answers: save now.
  size_t from_peer = std::count_if(log_acks_due_.begin(), log_acks_due_.end(),
                                   [&](const auto& due) { return due.first == peer; });
  if (from_peer >= kLogAcksBeforeFlush) flush_logs();
}

void CoordinatorImpl::flush_logs() {
  last_log_flush_ = clock_.now();
  auto changes = logs_.take_changes();
  if (db_ && !changes.empty()) {
    if (auto s = db_->save_logs(changes); !s) spdlog::error("cannot save log lines: {}", s.message());
  }
  // Answered even when saving failed: the lines are in memory, and an agent
  // sending them again would not help.
  for (const auto& [peer, id] : log_acks_due_) reply(peer, id, Ack{});
  log_acks_due_.clear();
}

void CoordinatorImpl::forget_logs(const std::string& job_id) {
  logs_.forget(job_id);
  if (!db_) return;
  if (auto s = db_->remove_logs(job_id); !s) spdlog::error("{}", s.message());
}

void CoordinatorImpl::on_workers_started(const std::string& peer, const Envelope& e) {
  auto m = body_as<WorkersStarted>(e);
  if (!m) return (void)warn_bad_input(m.status().message());
  auto it = jobs_.find(m->job_id);
  if (it == jobs_.end()) return;
  Job& job = it->second;
  Attempt* a = job.current();
  // Only the connection of rank 0's node picks the port, once per attempt.
  const Node* sender = node_of_peer(peer);
  if (!a || a->number != m->attempt || a->state != AttemptState::kRunning || a->master_port != 0 ||
      !sender || sender->name != a->nodes.front() || sender->name != m->node) {
    return;
  }
  if (m->master_port < 1 || m->master_port > 65535) {
    return (void)warn_bad_input("workers_started for job " + m->job_id + " names port " +
                                std::to_string(m->master_port));
  }
  release_held_nodes(job, m->master_port);
}

void CoordinatorImpl::on_metric_batch(const std::string& peer, const Envelope& e) {
  auto m = body_as<MetricBatch>(e);
  if (!m) return (void)warn_bad_input(m.status().message());
  auto it = jobs_.find(m->job_id);
  if (it == jobs_.end()) return;
  Job& job = it->second;
  const Attempt* a = job.current();
  // Only the connection of the node that runs rank 0 of the live attempt
  // speaks for the job's figures.
  const Node* sender = node_of_peer(peer);
  if (!a || a->number != m->attempt || a->nodes.empty() || !sender || a->nodes.front() != sender->name ||
      sender->name != m->node) {
    return;
  }
  for (const auto& row : m->rows) job.training.add(row);
  if (m->total_steps > 0) job.total_steps = m->total_steps;
  if (!m->rows.empty()) job.eta_s = m->eta_s;
}

void CoordinatorImpl::on_gpu_report(const std::string& peer, const Envelope& e) {
  auto m = body_as<GpuReport>(e);
  if (!m) return (void)warn_bad_input(m.status().message());
  const Node* n = node_of_peer(peer);
  if (!n || n->name != m->node) return;  // only from the connection that registered it
  auto& samples = gpu_samples_[n->name];
  samples = std::move(m->samples);
  if (samples.size() > n->gpus.size()) samples.resize(n->gpus.size());
  std::string faults;
  for (auto& s : samples) {
    s.fault = shorten(s.fault, 200);
    if (!s.fault.empty()) faults += (faults.empty() ? "" : "; ") + ("GPU " + std::to_string(s.index) + ": " + s.fault);
  }
  if (!faults.empty() && !n->drained) drain_unhealthy(n->name, "unhealthy GPU: " + faults);
}

void CoordinatorImpl::drain_unhealthy(const std::string& node, const std::string& reason) {
  // Its jobs restart elsewhere without restart budget (StopIntent::kDrain);
  // the node takes work again after `cohort undrain`.
  registry_.drain_for(node, reason);
  save_node(node);
  spdlog::warn("node {} drained: {}", node, reason);
  stop_work_on(node, "node " + node + " drained: " + reason);
  schedule();
}

void CoordinatorImpl::on_store(const std::string& peer, const Envelope& e) {
  COHORT_PARSE_OR_REPLY(StoreRequest, m);
  uint64_t id = e.id;
  // Only a live attempt has a namespace: a straggler of an ended attempt
  // must neither read the new one's keys nor leave keys nobody drops.
  auto job = jobs_.find(m.job_id);
  const Attempt* attempt = job == jobs_.end() ? nullptr : job->second.current();
  if (!attempt || attempt->number != m.attempt || !attempt->active()) {
    return reply_error(peer, id, aborted("job " + shorten(m.job_id, 64) + " attempt " +
                                             std::to_string(m.attempt) + " is not running"));
  }
  // The attempt's token (a secret its workers got at launch), and only from
  // a node the attempt runs on: no other peer reads or writes its keys.
  const Node* n = node_of_peer(peer);
  if (attempt->store_token.empty() || m.token != attempt->store_token || !n ||
      !attempt->gpus.count(n->name)) {
    warn_bad_input("refused a store request for job " + m.job_id + ": wrong token or not one of its nodes");
    return reply_error(peer, id, permission_denied("store: wrong store token for job " + m.job_id +
                                                       " attempt " + std::to_string(m.attempt)));
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
  check_time_limits();
  schedule();
  if (clock_.now() - last_log_flush_ >= options_.log_flush_interval) flush_logs();
  if (clock_.now() - last_trim_ > std::chrono::seconds(10)) {
    last_trim_ = clock_.now();
    retire_finished_jobs();
    // Hands freed buffers back after a flood (glibc keeps them otherwise;
    // a flooded coordinator stayed at 175 MB after the flood was gone).
    malloc_trim(0);
  }
}

}  // namespace cohort::coordinator
