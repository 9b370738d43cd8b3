// Drains: `cohort drain` and `cohort undrain` from clients, and an agent
// leaving the cluster on SIGTERM. A drained or leaving node takes no new
// work; the attempts it runs stop with StopIntent::kDrain (restarted without
// using restart budget, elsewhere) or, for `cohort drain` without
// --stop-running, finish there. Node states are in node_registry.h.
#include <spdlog/spdlog.h>

#include "coordinator/coordinator_impl.h"
#include "protocol/input_log.h"

namespace cohort::coordinator {

using namespace protocol;

std::vector<std::string> CoordinatorImpl::jobs_on(const std::string& node) const {
  std::vector<std::string> out;
  for (const auto& [id, job] : jobs_) {
    if (!job.attempts.empty() && job.attempts.back().active() && job.attempts.back().gpus.count(node)) {
      out.push_back(id);
    }
  }
  return out;
}

int CoordinatorImpl::stop_work_on(const std::string& node, const std::string& reason) {
  int stopping = 0;
  for (const auto& id : jobs_on(node)) {
    Job& job = jobs_.at(id);
    Attempt* a = job.current();
    if (!a || a->state != AttemptState::kRunning) continue;
    ++stopping;
    begin_stop(job, StopIntent::kDrain, reason);
  }
  return stopping;
}

void CoordinatorImpl::save_node(const std::string& name) {
  const Node* n = registry_.find(name);
  if (!db_ || !n) return;
  if (auto s = db_->save_node(*n); !s) spdlog::error("{}", s.message());
}

void CoordinatorImpl::on_drain(const std::string& peer, const Envelope& e) {
  COHORT_PARSE_OR_REPLY(DrainNode, m);
  const Node* n = registry_.find(m.node);
  if (!n) return reply_error(peer, e.id, not_found("no node '" + shorten(m.node, 64) + "' (see `cohort nodes`)"));
  registry_.set_drained(m.node, true);
  save_node(m.node);
  spdlog::info("node {} drained{}", m.node, m.stop_running ? ", stopping its work" : "");
  int stopping = m.stop_running ? stop_work_on(m.node, "node " + m.node + " drained (cohort drain --stop-running)") : 0;
  std::string text = "node " + m.node + " drained: no new work there until `cohort undrain " + m.node + "`";
  auto running = jobs_on(m.node);
  if (stopping > 0) {
    text += "; stopping " + std::to_string(stopping) + " job(s) there (they restart elsewhere, no restart budget used)";
  } else if (!running.empty()) {
    std::string list;
    for (const auto& id : running) list += (list.empty() ? "" : ", ") + id;
    text += "; " + list + " finish(es) there first (--stop-running stops them now)";
  }
  if (!is_connected(n->state)) text += " (it is " + std::string(to_string(n->state)) + " now)";
  reply(peer, e.id, Ack{text});
}

void CoordinatorImpl::on_undrain(const std::string& peer, const Envelope& e) {
  COHORT_PARSE_OR_REPLY(UndrainNode, m);
  const Node* n = registry_.find(m.node);
  if (!n) return reply_error(peer, e.id, not_found("no node '" + shorten(m.node, 64) + "' (see `cohort nodes`)"));
  registry_.set_drained(m.node, false);
  save_node(m.node);
  spdlog::info("node {} undrained", m.node);
  std::string text = n->state == NodeState::kAlive ? "node " + m.node + " takes new work again"
                     : n->leaving                  ? "node " + m.node + " is leaving (its agent is stopping)"
                                                   : "node " + m.node + " is " + to_string(n->state) +
                                                         "; it takes work once its agent registers";
  schedule();
  maybe_scale_up();
  reply(peer, e.id, Ack{text});
}

void CoordinatorImpl::on_node_leaving(const std::string& peer, const Envelope& e) {
  auto m = body_as<NodeLeaving>(e);
  if (!m) return (void)warn_bad_input(m.status().message());
  const Node* n = node_of_peer(peer);
  if (!n || n->name != m->node) {
    return (void)warn_bad_input("node_leaving for " + shorten(m->node, 64) + " from a connection that is not that node's");
  }
  std::string why = shorten(m->reason.empty() ? "its agent is stopping" : m->reason, 200);
  spdlog::info("node {} is leaving ({}): draining it", m->node, why);
  registry_.mark_leaving(m->node);
  stop_work_on(m->node, "node " + m->node + " is leaving (" + why + ")");
}

void CoordinatorImpl::on_node_left(const std::string& peer, const Envelope& e) {
  auto m = body_as<NodeLeft>(e);
  if (!m) return (void)warn_bad_input(m.status().message());
  const Node* n = node_of_peer(peer);
  if (!n || n->name != m->node) {
    return (void)warn_bad_input("node_left for " + shorten(m->node, 64) + " from a connection that is not that node's");
  }
  registry_.mark_left(m->node);
  save_node(m->node);
  spdlog::info("node {} left", m->node);
  // Whatever still counts as running there is gone with it, on purpose.
  for (const auto& id : jobs_on(m->node)) {
    Job& job = jobs_.at(id);
    Attempt* a = job.current();
    for (auto& r : a->ranks) {
      if (r.node == m->node) r.state = RankState::kExited;
    }
    if (a->state == AttemptState::kRunning) {
      begin_stop(job, StopIntent::kDrain, "node " + m->node + " left");
    } else {
      check_attempt_done(job);
    }
  }
}

}  // namespace cohort::coordinator
