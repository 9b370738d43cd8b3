// Private: the coordinator's state and handlers, split over coordinator.cc
// (messages, nodes, queries), client_requests.cc (clients' requests),
// node_drain.cc, job_placement.cc (scheduling, attempt starts, scale-up),
// queue_rules.cc (dependencies, time limits, preemption) and
// job_lifecycle.cc (stops, exits, failures, restarts, recovery).
#pragma once

#include <deque>
#include <map>
#include <memory>

#include <boost/asio/steady_timer.hpp>

#include "coordinator/coordinator.h"
#include "coordinator/elastic_batch.h"
#include "coordinator/http_api.h"
#include "coordinator/job_record.h"
#include "coordinator/key_limits.h"
#include "coordinator/log_buffer.h"
#include "coordinator/node_registry.h"
#include "coordinator/placement.h"
#include "coordinator/rendezvous_store.h"
#include "coordinator/state_db.h"
#include "protocol/codec.h"
#include "protocol/input_log.h"
#include "protocol/transport.h"

namespace cohort::coordinator {

// What placing `job` asks of the cluster (job_placement.cc).
PlacementRequest request_for(const Job& job);

// Every handler parses its body first; a bad body is answered, not fatal.
#define COHORT_PARSE_OR_REPLY(Type, var)                       \
  auto var##_result = protocol::body_as<Type>(e);              \
  if (!var##_result) {                                         \
    protocol::warn_bad_input(var##_result.status().message()); \
    reply_error(peer, e.id, var##_result.status());            \
    return;                                                    \
  }                                                            \
  const Type& var = *var##_result

class CoordinatorImpl final : public Coordinator {
 public:
  CoordinatorImpl(boost::asio::io_context& io, CoordinatorOptions options);
  ~CoordinatorImpl() override { flush_logs(); }
  Status open();
  std::string endpoint() const override { return router_->endpoint(); }
  std::vector<protocol::JobInfo> jobs() const override;
  int http_port() const override { return http_ ? http_->port() : 0; }

 private:
  // ---- coordinator.cc: transport and handlers ----
  void on_message(const std::string& peer, std::string payload, protocol::Role role);
  void dispatch(const std::string& peer, const protocol::Envelope& e);
  template <typename T>
  void reply(const std::string& peer, uint64_t id, const T& message) {
    send_payload(peer, protocol::encode(message, id));
  }
  void reply_error(const std::string& peer, uint64_t id, const Status& status);
  void send_payload(const std::string& peer, const std::string& payload);
  template <typename T>
  bool send_to_node(const std::string& node, const T& message);

  void on_register(const std::string& peer, const protocol::Envelope& e);
  // With CURVE: may the agent key of the message being handled register
  // `node`? (Its restriction at keygen, and the key the name is bound to.)
  Status check_node_key(const std::string& node) const;
  // Binds `node` to that key on first use (kept in the state database).
  void bind_node_key(const std::string& node);
  void on_heartbeat(const std::string& peer, const protocol::Envelope& e);
  // A registering agent's report of the workers it stopped while cut off.
  void note_fencing(const protocol::RegisterNode& m);
  void on_worker_exit(const std::string& peer, const protocol::Envelope& e);
  void on_log_batch(const std::string& peer, const protocol::Envelope& e);
  void on_workers_started(const std::string& peer, const protocol::Envelope& e);
  void on_metric_batch(const std::string& peer, const protocol::Envelope& e);
  void on_gpu_report(const std::string& peer, const protocol::Envelope& e);
  // An agent reported an unhealthy GPU: the node is drained with `reason`.
  void drain_unhealthy(const std::string& node, const std::string& reason);
  void on_submit(const std::string& peer, const protocol::Envelope& e);
  void on_job_query(const std::string& peer, const protocol::Envelope& e);
  void on_node_query(const std::string& peer, const protocol::Envelope& e);
  void on_cancel(const std::string& peer, const protocol::Envelope& e);
  void on_log_query(const std::string& peer, const protocol::Envelope& e);
  void on_store(const std::string& peer, const protocol::Envelope& e);
  void on_remove_job(const std::string& peer, const protocol::Envelope& e);
  void on_remove_node(const std::string& peer, const protocol::Envelope& e);

  // ---- node_drain.cc ----
  void on_drain(const std::string& peer, const protocol::Envelope& e);
  void on_undrain(const std::string& peer, const protocol::Envelope& e);
  void on_node_leaving(const std::string& peer, const protocol::Envelope& e);
  void on_node_left(const std::string& peer, const protocol::Envelope& e);
  // Ids of the jobs whose current attempt is active on `node`.
  std::vector<std::string> jobs_on(const std::string& node) const;
  // Stops (StopIntent::kDrain) the running attempts on `node`; how many.
  int stop_work_on(const std::string& node, const std::string& reason);
  void save_node(const std::string& name);
  // The node whose agent registered from `peer` and is alive; null otherwise.
  const Node* node_of_peer(const std::string& peer) const;
  // Finished jobs beyond the retention leave memory (they stay in SQLite);
  // what became of them is kept in retired_.
  void retire_finished_jobs();
  // The not-found answer for a job that is not in memory: for a retired one
  // it says how it ended and when it was retired.
  Status missing_job(const std::string& id_or_name) const;
  static std::string new_store_token();
  void arm_tick();
  void tick();
  Job* find_job(const std::string& id_or_name);
  // The queued or running job whose output_dir is `output_dir` (one job per
  // output folder: a second is refused at submit); null when none.
  const Job* live_job_writing(const std::string& output_dir) const;
  std::vector<protocol::NodeInfo> node_infos() const;
  // The web page's and /metrics' sources (http_api.h).
  HttpSources http_sources();
  // Log lines not yet in the state database go there (once a second, and
  // when many are waiting); a removed or retired job's lines leave it.
  void flush_logs();
  // flush_logs() when `peer` has kLogAcksBeforeFlush log batches unanswered.
  void flush_full_log_window(const std::string& peer);
  void forget_logs(const std::string& job_id);
  // For LogReply::note: where the lines a query misses are.
  std::string logs_note(const Job& job, const protocol::LogQuery& query) const;
  // Cancels by id or name; a message for the client in *text.
  Status cancel_job(const std::string& id_or_name, std::string* text);

  // ---- job_placement.cc ----
  void schedule();
  std::vector<NodeCapacity> capacity() const;
  // Every alive node's GPUs, as if no job ran.
  std::vector<NodeCapacity> empty_capacity() const;
  void start_attempt(Job& job, const std::vector<NodeAssignment>& placement, const BatchPlan& batch);
  // The launch order of the attempt's node `node_rank`; false when its agent
  // cannot be reached.
  bool send_launch(const Job& job, const Attempt& attempt, int node_rank);
  // Rank 0's node picked MASTER_PORT: the held nodes get their orders.
  void release_held_nodes(Job& job, int master_port);
  // A launch order that could not reach `node`: lost, the attempt stopped
  // without using restart budget (StopIntent::kUndelivered).
  void launch_undelivered(Job& job, const std::string& node);
  // Connected nodes an order could not reach: lost now (on_node_lost).
  void lose_unreachable_nodes(const std::vector<std::string>& nodes);
  void maybe_scale_up();

  // ---- queue_rules.cc ----
  // Running jobs past job.time_limit stop (StopIntent::kTimeLimit) and end timed_out.
  void check_time_limits();
  // `job` (queued, not placeable now) stops the fewest lower-priority
  // preemptible jobs that make it fit (StopIntent::kPreempt: they requeue
  // without using restart budget); true while it waits for such stops.
  bool preempt_for(const Job& job);
  // True when every job.depends_on entry holds; otherwise the job's message
  // says what it waits for, or the job is cancelled when an entry never can.
  bool dependencies_met(Job& job);
  // A job's state by id, in memory or retired; "" for an unknown id.
  std::string state_of_job(const std::string& id) const;
  // Per-client-key limits (key_limits.h): those of `key`, and what its jobs
  // use now.
  KeyLimits limits_of(const std::string& key) const;
  KeyUsage usage_of(const std::string& key) const;
  // False while the job's key may not take even job.nodes' MIN nodes more
  // (the job's message and an event say so; placement_timeout starts again
  // from then); else caps request->nodes_max to what the key may take.
  bool within_key_limit(Job& job, PlacementRequest* request);

  // ---- job_lifecycle.cc ----
  void begin_stop(Job& job, StopIntent intent, const std::string& reason);
  void rank_exited(Job& job, int rank, const protocol::WorkerExit& exit);
  void check_attempt_done(Job& job);
  void finish_attempt(Job& job);
  void requeue(Job& job, bool counts, const std::string& why);
  void end_job(Job& job, JobState state, const std::string& message);
  // `why` defaults to the heartbeat timeout. Stops the attempts running
  // there (one failure each) and names the loss as the root cause of an
  // attempt already stopping for a rank failure within the consequence window.
  void on_node_lost(const std::string& node, const std::string& why = "");
  bool loss_caused_the_stop(const Attempt& attempt) const;
  // A worker its agent says is running: confirms it, or orders it stopped.
  void reconcile_worker(const std::string& node, const protocol::RunningWorker& worker);
  // Ranks the coordinator thinks run on `node` that its agent no longer
  // lists (a lost launch order or exit report) count as gone.
  void reconcile_missing(const std::string& node, const std::vector<protocol::RunningWorker>& running);
  void check_recovery();
  // Saves the job; the error is logged and returned (submit refuses on it).
  Status save_job(const Job& job);
  void persist(const Job& job) { (void)save_job(job); }
  Status recover_from_db();

  boost::asio::io_context& io_;
  CoordinatorOptions options_;
  const Clock& clock_;
  std::unique_ptr<protocol::RouterEndpoint> router_;
  NodeRegistry registry_;
  RendezvousStore store_;
  LogBuffer logs_;
  std::unique_ptr<StateDb> db_;
  std::map<std::string, Job> jobs_;
  // The newest kMaxRetiredJobs jobs retired from memory, oldest first
  // (about 100 bytes each).
  struct RetiredJob {
    std::string id, name, state;
    int64_t ended_ms = 0, retired_ms = 0;
  };
  static constexpr size_t kMaxRetiredJobs = 10000;
  std::deque<RetiredJob> retired_;
  // Each node's newest GPU figures (GpuReport), at most one per GPU it has.
  std::map<std::string, std::vector<protocol::GpuSample>> gpu_samples_;
  // Per node, the envelope ids of the last log batches taken: a batch its
  // agent sends again (the answer was lost) is not stored twice.
  static constexpr size_t kLogBatchIdsKept = 64;
  std::map<std::string, std::deque<uint64_t>> log_batches_seen_;
  // Node name -> the agent key that registered it first (CURVE only);
  // `cohort nodes rm` unbinds.
  std::map<std::string, std::string> node_keys_;
  // (peer, envelope id) of log batches taken but not saved yet: answered by
  // flush_logs(), at once when one peer has kLogAcksBeforeFlush waiting
  // (the agent's window, agent.cc), else at the next tick.
  static constexpr size_t kLogAcksBeforeFlush = 4;
  std::vector<std::pair<std::string, uint64_t>> log_acks_due_;
  uint64_t next_seq_ = 1;
  protocol::Role role_ = protocol::Role::kTrusted;  // of the message being handled
  Clock::TimePoint last_trim_{};
  Clock::TimePoint last_log_flush_{};
  boost::asio::steady_timer timer_;
  std::unique_ptr<HttpApi> http_;
};

}  // namespace cohort::coordinator
