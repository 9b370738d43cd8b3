// The coordinator's record of a job and its attempts.
//
// Job states and transitions:
//   kQueued   --placed-->            kRunning   (an attempt starts)
//   kQueued   --cancel-->            kCancelled
//   kQueued   --placement_timeout--> kFailed
//   kQueued   --a depends_on entry can no longer hold--> kCancelled
//   kRunning  --time_limit reached--> kStopping --all ranks gone--> kTimedOut
//   kRunning  --preempted by a higher priority--> kStopping --all ranks gone--> kQueued (no budget)
//   kRunning  --all ranks exit 0-->  kSucceeded
//   kRunning  --failure/loss/cancel/scale-up/recovery--> kStopping
//   kStopping --all ranks gone-->    kQueued    (restart: budget left, or a
//                                                scale-up/recovery restart)
//                                    kFailed    (no restarts left)
//                                    kCancelled (cancel)
// Attempt states:
//   kRunning --all ranks exit 0--> kSucceeded
//   kRunning --stop begins-->      kStopping --all ranks gone--> kFailed | kStopped
// An attempt "fails" when a rank failed or a node was lost; it is "stopped"
// when it was ended on purpose (cancel, scale-up, a drained or leaving node,
// recovery after a coordinator restart) or never ran everywhere (a launch
// order that could not be delivered). A stopped attempt's restart uses no
// budget.
// Elastic accounting: one failed attempt is one restart, whatever else fails
// while it stops. Rank failures after the stop began are consequences, never
// causes. A node lost within the consequence window after a rank failure
// (CoordinatorOptions::consequence_window) is the cause: the survivor's
// "connection reset" is what the loss looked like before heartbeats noticed,
// so the root cause is replaced by the loss. A node whose stop or launch
// order cannot be delivered is lost at once, so that it is never in the
// next placement.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "base/status.h"
#include "coordinator/training_series.h"
#include "protocol/job_control.h"
#include "protocol/messages.h"

namespace cohort::coordinator {

// Persisted as ordinals: new values go at the end.
enum class JobState { kQueued, kRunning, kStopping, kSucceeded, kFailed, kCancelled, kTimedOut };
enum class AttemptState { kRunning, kStopping, kSucceeded, kFailed, kStopped };
// Why an attempt is being stopped; decides what happens once it has stopped.
// Persisted as its ordinal: new values go at the end. kUndelivered: a launch
// order could not reach its node (lost at once); the attempt never ran
// everywhere, so its restart uses no budget.
// kPreempt: a higher-priority job needs the GPUs (job.preemptible); no budget.
enum class StopIntent { kNone, kFailure, kCancel, kScaleUp, kRecovery, kDrain, kUndelivered, kTimeLimit, kPreempt };

const char* to_string(JobState state);
const char* to_string(AttemptState state);
bool is_terminal(JobState state);

enum class RankState {
  kHeld,       // its node's launch order waits for MASTER_PORT from rank 0's node
  kRunning,    // launched (or confirmed by its agent after a coordinator restart)
  kUnconfirmed,  // after a coordinator restart, until its agent reports it
  kExited,
};

struct RankRecord {
  std::string node;
  RankState state = RankState::kRunning;
  int exit_code = 0;
  int signal = 0;
  bool success = false;
};

struct Attempt {
  int number = 0;
  AttemptState state = AttemptState::kRunning;
  StopIntent stop_intent = StopIntent::kNone;
  std::vector<std::string> nodes;               // node-rank order
  std::map<std::string, std::vector<int>> gpus;  // node → GPU indices
  int gpus_per_node = 1;
  int master_port = 0;  // 0 until rank 0's node has picked it (WorkersStarted)
  std::string store_token;  // COHORT_STORE_TOKEN of this attempt's workers
  // The job file its launch orders carry when it differs from the job's
  // (elastic_batch.h: the kept global batch written in); in memory only.
  std::string launch_toml;
  bool counts_as_restart = true;
  int64_t started_ms = 0;
  int64_t ended_ms = 0;
  std::string reason;
  bool has_root_cause = false;
  protocol::RootCause root_cause;
  bool root_cause_is_node_loss = false;  // a later loss does not replace it
  std::vector<RankRecord> ranks;  // by global rank
  Clock::TimePoint recovery_deadline{};  // while ranks are unconfirmed
  Clock::TimePoint launched_at{};
  Clock::TimePoint stop_began{};

  int world_size() const { return int(ranks.size()); }
  bool active() const { return state == AttemptState::kRunning || state == AttemptState::kStopping; }
  bool all_exited() const;
};

struct Job {
  std::string id;
  uint64_t seq = 0;  // submission order: FIFO within a priority
  // The resolved job file as submitted: what is stored, and what every
  // launch order carries. `control` is read from it (job_control_from_toml).
  std::string job_toml;
  protocol::JobControl control;
  // The client key that submitted it ("" without CURVE): its limits hold
  // for the job (key_limits.h). `owner` is how users see that key, made
  // from the coordinator's key list at submit and at restart.
  std::string owner_key;
  std::string owner;
  JobState state = JobState::kQueued;
  int restarts_used = 0;
  bool next_attempt_counts = true;  // false after a scale-up or recovery stop
  bool cancel_requested = false;
  int64_t submitted_ms = 0;
  int64_t ended_ms = 0;
  Clock::TimePoint queued_since{};
  // When its first attempt started (time_limit counts from there); set
  // again from the first attempt's start after a coordinator restart.
  Clock::TimePoint first_started{};
  std::string message;
  bool has_root_cause = false;
  protocol::RootCause root_cause;
  std::vector<Attempt> attempts;
  std::vector<protocol::EventInfo> events;
  // The figures of a training job (metrics.jsonl rows from rank 0's node);
  // in memory only: a restarted coordinator plots from its restart on.
  TrainingSeries training;
  int64_t total_steps = 0;  // from the rows, when they say
  double eta_s = -1;        // rank 0's estimate with its newest rows; -1: unknown

  Attempt* current() { return attempts.empty() ? nullptr : &attempts.back(); }
  void add_event(const std::string& text);
  protocol::JobInfo info() const;
};

int64_t unix_ms_now();

// Durable form (state_db): everything but per-rank runtime detail, which a
// restarted coordinator learns again from its agents. The job itself is its
// resolved file ("job_toml"); `control` is read from it again on load. A
// record of the format before it ("control": the fields and the file
// together) loads through the file it holds.
nlohmann::json job_to_json(const Job& job);
Result<Job> job_from_json(const nlohmann::json& j);

}  // namespace cohort::coordinator
