// Supervisor: the workers of every job attempt running on this node.
//
// For each launch order it opens the attempt's log files, starts a store
// proxy, builds each worker's environment (launch_env.h) and spawns one
// process per local rank through the injected ProcessLauncher. It reports
// every line (to the log files at once, and to the agent for forwarding) and
// every exit, and detects hangs.
//
// Progress, for jobs with hang_timeout: a worker reports it by touching (or
// rewriting) the file named in COHORT_PROGRESS_FILE, or by setting the store
// key "cohort/progress/<RANK>" through COHORT_STORE. A rank with neither for
// hang_timeout seconds (counted from its start) is hung.
//
// Worker states and transitions:
//   kRunning  --exits on its own-->            kExited  (reported as is)
//   kRunning  --stop order / hang / fence / shutdown--> kStopping (SIGTERM to its
//             group, SIGKILL after stop_grace) --exits--> kExited
// A worker that hung, or was fenced (the agent lost the coordinator), is
// reported as failed with that reason even though the supervisor stopped
// it; one stopped on order is reported as stopped.
//
// Threading: every method runs on the agent's io_context thread; launcher
// callbacks are posted there. Reports (Sink) are called on that thread.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "agent/port_claim.h"
#include "agent/output_dir_lock.h"
#include "agent/process_launcher.h"
#include "agent/store_proxy.h"
#include "agent/worker_logs.h"
#include "base/clock.h"
#include "protocol/job_control.h"
#include "protocol/messages.h"

namespace cohort::agent {

enum class WorkerState { kRunning, kStopping, kExited };
const char* to_string(WorkerState state);

struct SupervisorOptions {
  std::string node;           // this node's name, in reports
  std::string worker_binary;  // cohort-worker, for train and infer jobs
  bool cpu_slots = false;     // the node's "GPUs" are CPU slots: no CUDA_VISIBLE_DEVICES
  std::string store_host = "127.0.0.1";
  jobs::PortRange port_range;  // --port-range: MASTER_PORT candidates (empty: any job range, else the default)
  // The node's network for its workers' collectives (launch_env.h).
  std::string node_address{};
  std::string node_interface{};
  bool node_network_named = false;
};

struct SupervisorSink {
  // Called on the launcher's threads (any thread): must be thread-safe and
  // must not outlive what it captures by reference.
  std::function<void(const std::string& job_id, protocol::LogLine line)> line;
  std::function<void(protocol::WorkerExit exit)> exit;
  // This node runs rank 0 and chose MASTER_PORT (the order said 0): the
  // coordinator needs it for the other nodes' orders.
  std::function<void(protocol::WorkersStarted started)> started;
};

class Supervisor {
 public:
  Supervisor(boost::asio::io_context& io, ProcessLauncher& launcher, const Clock& clock,
             SupervisorOptions options, StoreForward forward, SupervisorSink sink);
  ~Supervisor();

  // Starts the order's workers (a repeated order is ignored): reads the
  // job's JobControl from the order's job file (job_control_from_toml) and
  // writes that file for cohort-worker. An order with master_port 0 gets a
  // free port of the job's range claimed here (held until the attempt's last
  // worker here exits) and reported through Sink::started. Failures, a job
  // file that does not load among them, are reported as exits of the order's
  // ranks (one per entry of gpu_indices) naming the cause, never returned.
  void launch(const protocol::LaunchOrder& order);
  // Starts nothing and reports each of the order's ranks as stopped, `why`
  // as its last line (the agent is leaving).
  void refuse(const protocol::LaunchOrder& order, const std::string& why);
  // Stops the workers of one attempt (attempt -1: every attempt of the job).
  void stop(const std::string& job_id, int attempt, const std::string& reason);
  void stop_all(const std::string& reason);
  // Self-fencing: stops every running worker as failed for `reason` (their
  // exits carry it) and returns them.
  std::vector<protocol::RunningWorker> fence(const std::string& reason);
  // Hang detection: call periodically.
  void check_progress();
  // A progress report through the store (see above).
  void note_progress(const std::string& job_id, int attempt, int rank);

  std::vector<protocol::RunningWorker> running() const;
  // True while any worker of the attempt has not exited.
  bool runs(const std::string& job_id, int attempt) const { return groups_.count({job_id, attempt}) > 0; }
  // The job of an attempt this node runs, as read from its launch order;
  // nullptr when it runs none of it. Valid until the next call in.
  const protocol::JobControl* job_of(const std::string& job_id, int attempt) const;
  size_t live_workers() const;

 private:
  struct Worker {
    int rank = 0;
    int local_rank = 0;
    WorkerState state = WorkerState::kRunning;
    std::shared_ptr<ProcessHandle> handle;
    std::string progress_file;
    int64_t progress_mtime_ns = -1;
    Clock::TimePoint last_progress{};
    std::string failure;  // set when the supervisor ended it for a fault
  };
  struct Group {
    protocol::LaunchOrder order;
    protocol::JobControl job;  // read from order.job_toml
    std::shared_ptr<WorkerLogWriter> logs;
    std::unique_ptr<StoreProxy> store;
    std::vector<Worker> workers;
    std::optional<PortClaim> port;  // MASTER_PORT, when this node picked it
    // Node rank 0's hold on output_dir (output_dir_lock.h), shared with the
    // job's next attempt here so that a restart never lets go of it.
    std::shared_ptr<OutputDirLock> output_lock;
  };
  using Key = std::pair<std::string, int>;  // job id, attempt

  Status start_group(Group& group);
  Status claim_master_port(Group& group);
  // Node rank 0 locks the job's output_dir; refused when another process
  // (another `cohort run`, another cluster on shared storage) or another
  // job here writes there.
  Status lock_output_dir(Group& group);
  Result<std::vector<std::string>> worker_argv(const Group& group) const;
  void spawn_worker(const Key& key, Group& group, Worker& worker, const std::vector<std::string>& argv);
  void on_exit(const Key& key, int rank, ExitStatus status);
  void report_failure(const protocol::LaunchOrder& order, int rank, const std::string& why);
  void stop_worker(const Group& group, Worker& worker);
  void drop_if_done(const Key& key);

  boost::asio::io_context& io_;
  ProcessLauncher& launcher_;
  const Clock& clock_;
  SupervisorOptions options_;
  StoreForward forward_;
  SupervisorSink sink_;
  std::map<Key, Group> groups_;
  // output_dir → the lock of the job writing there (while any attempt holds it).
  std::map<std::string, std::pair<std::string, std::weak_ptr<OutputDirLock>>> output_locks_;
  std::mt19937_64 random_{std::random_device{}()};
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace cohort::agent
