// Control-plane messages: the typed structs that travel between the
// coordinator, its agents and CLI clients.
//
// Each message type is a plain struct with a `kType` name; protocol/codec.h
// wraps it in a versioned envelope. Fields have defaults, so a peer that omits
// a field it does not know yet still decodes (forward compatibility within a
// protocol version); a field of the wrong type is an error, never a crash.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace cohort::protocol {

// ---- shared pieces -------------------------------------------------------

struct GpuDesc {
  int index = 0;  // as nvidia-smi numbers it
  std::string uuid;
  std::string pci_bus_id;
  std::string name;
  uint64_t memory_bytes = 0;
};

// The first failing rank of an attempt: what `cohort status` shows.
struct RootCause {
  int rank = -1;
  std::string node;
  int exit_code = 0;
  int signal = 0;
  std::string reason;  // "exited with code 3", "killed by SIGKILL", "node lost", …
  std::vector<std::string> last_lines;
};

struct AttemptInfo {
  int number = 0;
  std::string state;
  std::vector<std::string> nodes;  // in node-rank order
  int world_size = 0;
  int64_t started_ms = 0;  // unix ms
  int64_t ended_ms = 0;
  std::string reason;  // why it ended
  bool has_root_cause = false;
  RootCause root_cause;
  bool counts_as_restart = true;  // false for scale-up and recovery restarts
};

struct EventInfo {
  int64_t time_ms = 0;  // unix ms
  std::string text;
};

// A running training job's newest figures, from the metrics rank 0's node
// forwards (MetricBatch): what `cohort status JOB` shows as live progress.
struct TrainingProgress {
  int64_t step = 0;
  int64_t total_steps = 0;   // 0: unknown
  double loss = 0;
  double tokens_per_s = 0;   // 0: unknown
  double eta_s = -1;         // -1: unknown; counted down to the reply's time
  int64_t age_ms = 0;        // how old the newest row is at the reply's time
};

struct JobInfo {
  std::string id;
  std::string name;
  std::string kind;
  std::string state;
  int priority = 0;
  int nodes_min = 1;
  int nodes_max = 1;
  int gpus_per_node = 1;
  int max_restarts = 0;
  int restarts_used = 0;
  std::string output_dir;
  // Who submitted it: the client key's name= in the coordinator's
  // authorized_clients, else the key's first characters; "" without CURVE.
  std::string owner;
  int64_t submitted_ms = 0;
  int64_t ended_ms = 0;
  std::string message;  // why it is queued, or how it ended
  bool has_root_cause = false;
  RootCause root_cause;
  std::vector<AttemptInfo> attempts;
  std::vector<EventInfo> events;
  // Filled by the coordinator's job replies (status, jobs). elapsed_ms: from
  // the first attempt's start to the job's end (or the reply), 0 before it
  // started; gpu_hours: Σ over attempts of world size × the attempt's wall time.
  int64_t elapsed_ms = 0;
  double gpu_hours = 0;
  bool has_progress = false;  // a running train job that has reported a step
  TrainingProgress progress;
};

// What a GPU is doing now, from NVML where the node has it (GpuReport;
// nodes without NVML and CPU slots send none, fake GPUs fixed test values).
struct GpuSample {
  int index = 0;                 // as in GpuDesc
  double utilization = 0;        // busy share of the last sample period, 0..1
  uint64_t memory_used_bytes = 0;
  std::string fault;  // "" while healthy; else why not (Xid, ECC, not answering)
};

// One row of a training job's metrics.jsonl as the agent on rank 0's node
// forwards it. `values` holds the figures the row has (loss, lr,
// tokens_per_s, mfu, grad_norm, eval_loss, ...); the coordinator keeps the
// ones it knows and ignores the rest.
struct MetricRow {
  int64_t step = 0;
  double time = 0;  // unix seconds: the row's own `time`, else when the agent read it
  std::map<std::string, double> values;
};

struct NodeInfo {
  std::string name;
  std::string address;
  std::string state;  // alive | draining | drained (draining, nothing left on it) | left | lost
  std::vector<GpuDesc> gpus;
  std::vector<GpuSample> gpu_samples;
  int gpus_free = 0;
  int64_t heartbeat_age_ms = 0;
  std::vector<std::string> jobs;
  std::string drain_reason;  // why the coordinator drained it (an unhealthy GPU); "" otherwise
};

struct LogLine {
  uint64_t seq = 0;  // coordinator-assigned, per job
  int attempt = 0;
  int rank = 0;
  std::string text;
};

// A worker an agent is running, reported at registration and in heartbeats so
// that a restarted coordinator can tell which attempts are still alive.
struct RunningWorker {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  int pid = 0;
};

// ---- agent → coordinator -------------------------------------------------

struct RegisterNode {
  static constexpr const char* kType = "register_node";
  std::string node;
  std::string address;  // where this node's workers are reachable (MASTER_ADDR)
  std::vector<GpuDesc> gpus;
  std::vector<RunningWorker> running;
  // Workers the agent stopped on its own since it last registered, because
  // the coordinator had not answered for heartbeat_timeout (self-fencing),
  // and why: the coordinator notes it in those jobs' events.
  std::vector<RunningWorker> fenced{};
  std::string fence_reason{};
};

// Answered with an Ack of the same id: the agent's fencing lease
// (agent/coordinator_contact.h) runs from the send time of the last
// heartbeat answered.
struct Heartbeat {
  static constexpr const char* kType = "heartbeat";
  std::string node;
  std::vector<RunningWorker> running;
};

// The agent is leaving the cluster (it got SIGTERM): the coordinator puts the
// node in draining, stops the attempts running there (a drain, not a
// failure) and places nothing more on it. Then, once its workers are gone:
struct NodeLeaving {
  static constexpr const char* kType = "node_leaving";
  std::string node;
  std::string reason;  // "the agent got SIGTERM"
};
// ... the node has left: not lost, not a failure; its agent exits.
struct NodeLeft {
  static constexpr const char* kType = "node_left";
  std::string node;
};

// The node's GPU figures, every few seconds from agents that have NVML.
struct GpuReport {
  static constexpr const char* kType = "gpu_report";
  std::string node;
  std::vector<GpuSample> samples;
};

struct WorkerExit {
  static constexpr const char* kType = "worker_exit";
  std::string job_id;
  int attempt = 0;
  std::string node;
  int rank = 0;
  int exit_code = 0;
  int signal = 0;
  bool stopped = false;       // ended because it was told to stop
  std::string failure;        // set when it never started or hung: the reason
  std::vector<std::string> last_lines;
};

struct LogBatch {
  static constexpr const char* kType = "log_batch";
  std::string job_id;
  std::vector<LogLine> lines;  // seq unset
};

// The agent of node rank 0 has started its workers on `master_port`, the
// free port it chose (a launch order with master_port 0 asks it to); the
// coordinator then sends the other nodes their orders with that port.
struct WorkersStarted {
  static constexpr const char* kType = "workers_started";
  std::string job_id;
  int attempt = 0;
  std::string node;
  int master_port = 0;
};

// New rows of a training job's metrics.jsonl, from the agent of node rank 0.
struct MetricBatch {
  static constexpr const char* kType = "metric_batch";
  std::string job_id;
  int attempt = 0;
  std::string node;
  std::vector<MetricRow> rows;
  int64_t total_steps = 0;  // from rank 0's progress file; 0: unknown
  double eta_s = -1;        // likewise; -1: unknown
};

// ---- coordinator → agent -------------------------------------------------

struct RegisterAck {
  static constexpr const char* kType = "register_ack";
  int64_t heartbeat_interval_ms = 500;
  // How long the coordinator waits for a heartbeat before it declares the
  // node lost; the agent stops its workers when this long has passed since
  // its last answered heartbeat. 0 (an older coordinator): no fencing.
  int64_t heartbeat_timeout_ms = 0;
  // How long a restarted coordinator waits for its agents before it
  // restarts their attempts: the agent keeps its workers this long after
  // finding the coordinator's port closed.
  int64_t recovery_grace_ms = 0;
};

struct LaunchOrder {
  static constexpr const char* kType = "launch";
  std::string job_id;
  int attempt = 0;
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT
  int node_rank = 0;
  int num_nodes = 1;
  int world_size = 1;
  std::vector<int> gpu_indices;  // this node's GPUs for the job, local-rank order
  std::string master_addr;
  // 0: this node runs rank 0 and picks a free port itself (reported in
  // WorkersStarted); otherwise the port rank 0's node picked.
  int master_port = 0;
  // The job's resolved file, as submitted (SubmitJob::job_toml): the agent
  // reads its JobControl from it (protocol/job_control.h) and hands it to
  // cohort-worker.
  std::string job_toml;
  // A secret of this attempt: workers get it as COHORT_STORE_TOKEN, the
  // agent's store proxy and the coordinator's store refuse requests without it.
  std::string store_token;
};

struct StopOrder {
  static constexpr const char* kType = "stop";
  std::string job_id;
  int attempt = -1;  // -1: every attempt of the job
  std::string reason;
};

// ---- client ↔ coordinator ------------------------------------------------

// The job is its resolved file and nothing else (jobs::to_toml of the
// loaded JOB.toml: every key written out, paths absolute); the coordinator
// reads what it schedules by from it (protocol/job_control.h).
struct SubmitJob {
  static constexpr const char* kType = "submit";
  std::string job_toml;
};
struct SubmitReply {
  static constexpr const char* kType = "submit_reply";
  std::string job_id;
};

struct JobQuery {
  static constexpr const char* kType = "job_query";
  std::string job_id;  // empty: the list (newest `limit` jobs, oldest first)
  int limit = 0;       // 0: as many as fit in one reply
  std::string state;   // only jobs in this state ("running", ...); empty: all
};
struct JobList {
  static constexpr const char* kType = "job_list";
  std::vector<JobInfo> jobs;
  bool more = false;  // older jobs matched but did not fit (ask with a smaller scope)
  int total = 0;      // jobs that matched the query
};

// Forgets a finished job (memory and state database). Client role.
struct RemoveJob {
  static constexpr const char* kType = "job_remove";
  std::string job_id;
};
// Forgets a lost node (one that runs nothing). Client role.
struct RemoveNode {
  static constexpr const char* kType = "node_remove";
  std::string node;
};

// `cohort drain NODE`: no new work on the node until `cohort undrain`;
// with stop_running its running attempts stop now (elastic jobs shrink off
// it, others wait for room elsewhere; neither uses restart budget).
struct DrainNode {
  static constexpr const char* kType = "node_drain";
  std::string node;
  bool stop_running = false;
};
struct UndrainNode {
  static constexpr const char* kType = "node_undrain";
  std::string node;
};

struct NodeQuery {
  static constexpr const char* kType = "node_query";
};
struct NodeList {
  static constexpr const char* kType = "node_list";
  std::vector<NodeInfo> nodes;
};

struct CancelJob {
  static constexpr const char* kType = "cancel";
  std::string job_id;
};

struct LogQuery {
  static constexpr const char* kType = "log_query";
  std::string job_id;
  int rank = -1;      // -1: every rank
  int attempt = -1;   // -1: every attempt
  uint64_t after_seq = 0;  // lines with seq > after_seq
  int max_lines = 10000;
  int tail = 0;            // > 0: only the newest `tail` lines (after after_seq)
};
struct LogReply {
  static constexpr const char* kType = "log_reply";
  std::vector<LogLine> lines;
  uint64_t last_seq = 0;     // resume from here
  bool job_finished = false; // no more lines will come
  std::string job_state;
  // Set when lines the query asks for are not here but only in the per-rank
  // files on the nodes (dropped for the byte caps, or never received): where.
  std::string note;
};

// Rendezvous store: one namespace per job attempt.
struct StoreRequest {
  static constexpr const char* kType = "store";
  std::string job_id;
  int attempt = 0;
  std::string op;  // set | get | add | wait | check | delete
  std::vector<std::string> keys;
  std::string value;     // bytes (base64 on the wire)
  int64_t delta = 0;     // add
  int64_t timeout_ms = 0;  // get and wait; 0: the store's default
  std::string token;       // the attempt's store token (LaunchOrder::store_token)
};
struct StoreReply {
  static constexpr const char* kType = "store_reply";
  std::string value;  // get: bytes; add: the new value in decimal
  bool found = false; // check: all keys exist
};

// Plain acknowledgement (cancel, worker_exit, log_batch, heartbeat).
struct Ack {
  static constexpr const char* kType = "ack";
  std::string text;
};

// Any request can be answered with an error.
struct ErrorReply {
  static constexpr const char* kType = "error";
  std::string code;  // status_code_name of the failure, or "unknown_node"
  std::string message;
};

}  // namespace cohort::protocol
