// Placement: the gang scheduler's pass over the queue, the start of an
// attempt (launch orders, MASTER_PORT from rank 0's node), and scale-up of
// elastic jobs when nodes join. How attempts end is in job_lifecycle.cc;
// the queue's other rules (dependencies, time limits, preemption) in
// queue_rules.cc.
#include <algorithm>
#include <random>
#include <set>

#include <spdlog/spdlog.h>

#include "coordinator/coordinator_impl.h"
#include "coordinator/elastic_batch.h"
#include "jobs/rank_plan.h"

namespace cohort::coordinator {

using namespace protocol;

PlacementRequest request_for(const Job& job) {
  return {job.control.nodes_min, job.control.nodes_max, job.control.gpus_per_node};
}

std::vector<NodeCapacity> CoordinatorImpl::capacity() const {
  std::map<std::string, std::set<int>> used;
  for (const auto& [id, job] : jobs_) {
    if (job.attempts.empty() || !job.attempts.back().active()) continue;
    for (const auto& [node, gpus] : job.attempts.back().gpus) used[node].insert(gpus.begin(), gpus.end());
  }
  std::vector<NodeCapacity> out;
  for (const Node* n : registry_.nodes()) {
    if (n->state != NodeState::kAlive) continue;
    NodeCapacity c{n->name, {}};
    for (const auto& g : n->gpus) {
      if (!used[n->name].count(g.index)) c.free_gpus.push_back(g.index);
    }
    out.push_back(std::move(c));
  }
  return out;
}

void CoordinatorImpl::schedule() {
  std::vector<Job*> queued;
  for (auto& [id, job] : jobs_) {
    if (job.state == JobState::kQueued) queued.push_back(&job);
  }
  // FIFO within priority: higher priority first, then submission order. The
  // queue is strict: a job that does not fit holds back the ones behind it,
  // so a large job is never starved by a stream of small ones. The exception
  // is a job the cluster could not hold even empty (it waits for nodes to
  // join): it holds back nobody, or one oversized job would stall everything.
  std::sort(queued.begin(), queued.end(), [](Job* a, Job* b) {
    if (a->control.priority != b->control.priority) return a->control.priority > b->control.priority;
    return a->seq < b->seq;
  });
  bool blocked = false;
  for (Job* job : queued) {
    // A stop or start within this loop schedules too: skip what it placed or ended.
    if (job->state != JobState::kQueued) continue;
    // A job waiting for its dependencies, or for its key's GPU limit, holds
    // back nobody.
    if (!dependencies_met(*job)) continue;
    auto request = request_for(*job);
    if (!within_key_limit(*job, &request)) continue;
    auto cap = capacity();
    auto placement = blocked ? std::nullopt : place(request, cap);
    if (placement) {
      auto batch = plan_elastic_batch(job->job_toml, int(placement->size()));
      if (!batch) {
        end_job(*job, JobState::kFailed, batch.status().message());
        continue;
      }
      placement->resize(size_t(batch->nodes));
      start_attempt(*job, *placement, *batch);
      continue;
    }
    if (!blocked && preempt_for(*job)) {
      blocked = true;  // the freed GPUs are this job's: nobody behind it takes them
      job->message = "waiting for preempted job(s) to stop";
      continue;
    }
    double limit = job->control.placement_timeout_s;
    auto waited = clock_.now() - job->queued_since;
    int fit = count_fitting_nodes(request, cap);
    int fit_empty = count_fitting_nodes(request, empty_capacity());
    bool needs_more_nodes = fit_empty < request.nodes_min;
    std::string why = needs_more_nodes
                          ? "waiting for nodes: the cluster has " + std::to_string(fit_empty) + " of " +
                                std::to_string(request.nodes_min) + " node(s) with " +
                                std::to_string(request.gpus_per_node) + " GPU(s)"
                      : blocked ? "waiting behind an earlier job"
                                : "waiting for capacity: " + std::to_string(fit) + " of " +
                                      std::to_string(request.nodes_min) + " node(s) with " +
                                      std::to_string(request.gpus_per_node) + " free GPU(s)";
    if (limit > 0 && waited > std::chrono::duration<double>(limit)) {
      end_job(*job, JobState::kFailed,
              "could not be placed within placement_timeout (" + std::to_string(int(limit)) +
                  " s): " + why);
      continue;
    }
    job->message = why;
    if (!needs_more_nodes) blocked = true;
  }
}

std::vector<NodeCapacity> CoordinatorImpl::empty_capacity() const {
  std::vector<NodeCapacity> out;
  for (const Node* n : registry_.nodes()) {
    if (n->state != NodeState::kAlive) continue;
    NodeCapacity c{n->name, {}};
    for (const auto& g : n->gpus) c.free_gpus.push_back(g.index);
    out.push_back(std::move(c));
  }
  return out;
}

void CoordinatorImpl::start_attempt(Job& job, const std::vector<NodeAssignment>& placement,
                                    const BatchPlan& batch) {
  Attempt a;
  if (batch.launch_toml != job.job_toml) a.launch_toml = batch.launch_toml;
  a.number = int(job.attempts.size());
  a.gpus_per_node = job.control.gpus_per_node;
  a.counts_as_restart = job.next_attempt_counts;
  a.started_ms = unix_ms_now();
  a.ranks.resize(placement.size() * size_t(a.gpus_per_node));
  for (size_t i = 0; i < placement.size(); ++i) {
    const auto& p = placement[i];
    a.nodes.push_back(p.node);
    a.gpus[p.node] = p.gpu_indices;
    for (int g = 0; g < a.gpus_per_node; ++g) {
      a.ranks[jobs::assign_rank(int(i), g, a.gpus_per_node).rank].node = p.node;
    }
  }
  // Rank 0's node picks MASTER_PORT (a port free there and claimed from
  // every other job on that host); the other nodes' orders wait for it.
  a.master_port = 0;
  for (auto& r : a.ranks) {
    if (r.node != a.nodes.front()) r.state = RankState::kHeld;
  }
  a.store_token = new_store_token();
  a.launched_at = clock_.now();
  if (job.attempts.empty()) job.first_started = clock_.now();
  job.state = JobState::kRunning;
  job.next_attempt_counts = true;
  job.message.clear();
  std::string node_list;
  for (const auto& n : a.nodes) node_list += (node_list.empty() ? "" : ",") + n;
  job.add_event("attempt " + std::to_string(a.number) + " started on " + node_list +
                " (world size " + std::to_string(a.world_size()) + ")");
  spdlog::info("job {} attempt {} placed on {} (world size {})", job.id, a.number, node_list,
               a.world_size());
  if (!batch.note.empty()) {
    job.add_event("attempt " + std::to_string(a.number) + ": " + batch.note);
    spdlog::info("job {} attempt {}: {}", job.id, a.number, batch.note);
  }
  job.attempts.push_back(std::move(a));
  const Attempt& attempt = job.attempts.back();
  bool reached = send_launch(job, attempt, 0);
  persist(job);
  if (!reached) launch_undelivered(job, attempt.nodes.front());
}

void CoordinatorImpl::launch_undelivered(Job& job, const std::string& node) {
  // Lost first, so that the restart this stop leads to cannot place there.
  registry_.mark_lost(node);
  save_node(node);
  begin_stop(job, StopIntent::kUndelivered,
             "the launch order for node " + node + " could not be delivered (its agent cannot be reached)");
  on_node_lost(node, "its agent cannot be reached");
}

void CoordinatorImpl::lose_unreachable_nodes(const std::vector<std::string>& nodes) {
  for (const auto& node : nodes) {
    registry_.mark_lost(node);
    save_node(node);
    on_node_lost(node, "its agent cannot be reached");
  }
}

bool CoordinatorImpl::send_launch(const Job& job, const Attempt& attempt, int node_rank) {
  const std::string& node = attempt.nodes[size_t(node_rank)];
  const Node* master = registry_.find(attempt.nodes.front());
  LaunchOrder order;
  order.job_id = job.id;
  order.attempt = attempt.number;
  order.restart_count = job.restarts_used;
  order.node_rank = node_rank;
  order.num_nodes = int(attempt.nodes.size());
  order.world_size = attempt.world_size();
  order.gpu_indices = attempt.gpus.at(node);
  order.master_addr = master ? master->address : "127.0.0.1";
  order.master_port = node_rank == 0 ? 0 : attempt.master_port;
  order.job_toml = attempt.launch_toml.empty() ? job.job_toml : attempt.launch_toml;
  order.store_token = attempt.store_token;
  return send_to_node(node, order);
}

void CoordinatorImpl::release_held_nodes(Job& job, int master_port) {
  Attempt& a = *job.current();
  a.master_port = master_port;
  a.launched_at = clock_.now();
  std::vector<std::string> unreachable;
  for (size_t i = 1; i < a.nodes.size(); ++i) {
    bool held = false;
    for (auto& r : a.ranks) {
      if (r.node != a.nodes[i] || r.state != RankState::kHeld) continue;
      r.state = RankState::kRunning;
      held = true;
    }
    // Only orders still waiting go out (none after a coordinator restart).
    if (held && !send_launch(job, a, int(i))) unreachable.push_back(a.nodes[i]);
  }
  persist(job);
  if (unreachable.empty()) return;
  launch_undelivered(job, unreachable.front());
  lose_unreachable_nodes({unreachable.begin() + 1, unreachable.end()});
}

void CoordinatorImpl::maybe_scale_up() {
  for (auto& [id, job] : jobs_) {
    Attempt* a = job.current();
    if (!a || a->state != AttemptState::kRunning || !job.control.nodes_max ||
        int(a->nodes.size()) >= job.control.nodes_max || job.control.nodes_min == job.control.nodes_max) {
      continue;
    }
    int extra = 0;
    for (const auto& c : capacity()) {
      if (!a->gpus.count(c.name) && int(c.free_gpus.size()) >= job.control.gpus_per_node) ++extra;
    }
    // The key's GPU limit counts this job's GPUs: only what is left grows it.
    extra = std::min(extra, nodes_within_gpu_limit(limits_of(job.owner_key), usage_of(job.owner_key),
                                                   job.control.gpus_per_node));
    if (extra == 0) continue;
    // A restart that could not keep the global batch on more nodes would
    // come back at the same size, again and again.
    auto batch = plan_elastic_batch(job.job_toml, int(a->nodes.size()) + extra);
    if (!batch || batch->nodes <= int(a->nodes.size())) continue;
    begin_stop(job, StopIntent::kScaleUp,
               "scale-up: " + std::to_string(extra) + " more node(s) available (running on " +
                   std::to_string(a->nodes.size()) + " of at most " +
                   std::to_string(job.control.nodes_max) + ")");
  }
}

std::string CoordinatorImpl::new_store_token() {
  static std::random_device random;
  std::string token;
  for (int i = 0; i < 4; ++i) token += fmt::format("{:08x}", uint32_t(random()));
  return token;
}

}  // namespace cohort::coordinator
