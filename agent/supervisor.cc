// Supervisor: launching, watching and stopping a node's workers.
#include "agent/supervisor.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "base/atomic_file.h"
#include "agent/launch_env.h"
#include "jobs/rank_plan.h"

namespace cohort::agent {

namespace fs = std::filesystem;

const char* to_string(WorkerState state) {
  switch (state) {
    case WorkerState::kRunning: return "running";
    case WorkerState::kStopping: return "stopping";
    case WorkerState::kExited: return "exited";
  }
  return "unknown";
}

namespace {

constexpr size_t kRootCauseLines = 20;

// The ranks a launch order gives this node: one per GPU it names (the job's
// gpus_per_node in every order the coordinator sends).
int ranks_here(const protocol::LaunchOrder& order) {
  return int(std::min<size_t>(order.gpu_indices.size(), 1024));
}

std::chrono::milliseconds grace_of(const protocol::JobControl& job) {
  return std::chrono::milliseconds(int64_t(std::max(0.0, job.stop_grace_s) * 1000));
}

int64_t mtime_ns(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return -1;
  return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

}  // namespace

Supervisor::Supervisor(boost::asio::io_context& io, ProcessLauncher& launcher, const Clock& clock,
                       SupervisorOptions options, StoreForward forward, SupervisorSink sink)
    : io_(io), launcher_(launcher), clock_(clock), options_(std::move(options)),
      forward_(std::move(forward)), sink_(std::move(sink)) {}

Supervisor::~Supervisor() { *alive_ = false; }

void Supervisor::report_failure(const protocol::LaunchOrder& order, int rank,
                                const std::string& why) {
  protocol::WorkerExit exit;
  exit.job_id = order.job_id;
  exit.attempt = order.attempt;
  exit.node = options_.node;
  exit.rank = rank;
  exit.exit_code = 127;
  exit.failure = why;
  exit.last_lines = {why};
  sink_.exit(std::move(exit));
}

void Supervisor::refuse(const protocol::LaunchOrder& order, const std::string& why) {
  const int per_node = ranks_here(order);
  for (int l = 0; l < per_node; ++l) {
    protocol::WorkerExit exit;
    exit.job_id = order.job_id;
    exit.attempt = order.attempt;
    exit.node = options_.node;
    exit.rank = jobs::assign_rank(std::max(0, order.node_rank), l, per_node).rank;
    exit.stopped = true;
    exit.last_lines = {why};
    sink_.exit(std::move(exit));
  }
}

Result<std::vector<std::string>> Supervisor::worker_argv(const Group& group) const {
  const auto& job = group.job;
  if (job.kind == jobs::JobKind::kCommand) {
    if (job.argv.empty()) return invalid_argument("the command job has an empty command.argv");
    return job.argv;
  }
  const std::string& binary = options_.worker_binary;
  if (binary.empty() || ::access(binary.c_str(), X_OK) != 0) {
    return failed_precondition(
        "kind = \"" + std::string(jobs::to_string(job.kind)) + "\" runs the built-in worker cohort-worker, which is not built" +
        (binary.empty() ? std::string() : " (looked for " + binary + ")") +
        ": install it beside `cohort` or give the agent --worker-binary PATH (from a source tree: "
        "`cmake --build build --target cohort-worker`), or run your own program with kind = \"command\"");
  }
  // The resolved job file: what every rank of every attempt reads; 0600 from
  // creation on, since it holds [job.env] values and a serve job's api_key.
  fs::path path = fs::path(job.output_dir) / "job.resolved.toml";
  COHORT_RETURN_IF_ERROR(write_file_atomically(path.string(), group.order.job_toml, 0600));
  return std::vector<std::string>{binary, path.string()};
}

Status Supervisor::start_group(Group& group) {
  const auto& order = group.order;
  auto job = protocol::job_control_from_toml(order.job_toml);
  if (!job) return invalid_argument("bad launch order: " + job.status().message());
  group.job = std::move(*job);
  const int per_node = group.job.gpus_per_node;
  if (per_node < 1 || order.node_rank < 0 || order.num_nodes < 1 ||
      order.world_size != order.num_nodes * per_node) {
    return invalid_argument("bad launch order: node rank " + std::to_string(order.node_rank) +
                            " of " + std::to_string(order.num_nodes) + ", " +
                            std::to_string(per_node) + " workers per node, world size " +
                            std::to_string(order.world_size));
  }
  const std::string& output_dir = group.job.output_dir;
  if (output_dir.empty() || output_dir[0] != '/') {
    return invalid_argument("bad launch order: output_dir '" + output_dir + "' is not absolute");
  }
  std::error_code ec;
  fs::create_directories(output_dir, ec);
  if (ec) return io_error("cannot create output_dir " + output_dir + ": " + ec.message());
  COHORT_RETURN_IF_ERROR(lock_output_dir(group));
  COHORT_ASSIGN_OR_RETURN(auto logs, WorkerLogWriter::open(output_dir, order.attempt));
  group.logs = std::move(logs);
  std::weak_ptr<bool> alive = alive_;
  auto on_set = [this, alive, job_id = order.job_id, attempt = order.attempt](const std::string& key) {
    static const std::string kPrefix = "cohort/progress/";
    if (key.rfind(kPrefix, 0) != 0) return;
    int rank = std::atoi(key.c_str() + kPrefix.size());
    boost::asio::post(io_, [this, alive, job_id, attempt, rank] {
      if (alive.lock()) note_progress(job_id, attempt, rank);
    });
  };
  COHORT_ASSIGN_OR_RETURN(group.store, StoreProxy::start(order.job_id, order.attempt, forward_,
                                                         options_.store_host, on_set,
                                                         order.store_token));
  fs::path progress_dir =
      fs::path(output_dir) / "progress" / ("attempt-" + std::to_string(order.attempt));
  fs::create_directories(progress_dir, ec);
  if (ec) return io_error("cannot create " + progress_dir.string() + ": " + ec.message());
  int local = int(order.gpu_indices.size());
  if (local != per_node) {
    return invalid_argument("launch order gives " + std::to_string(local) + " GPUs for " +
                            std::to_string(per_node) + " workers per node");
  }
  for (int l = 0; l < local; ++l) {
    Worker w;
    w.local_rank = l;
    w.rank = jobs::assign_rank(order.node_rank, l, per_node).rank;
    w.progress_file = (progress_dir / ("rank-" + std::to_string(w.rank))).string();
    w.last_progress = clock_.now();
    group.workers.push_back(std::move(w));
  }
  return Status::ok();
}

Status Supervisor::lock_output_dir(Group& group) {
  if (group.order.node_rank != 0) return Status::ok();  // shared storage: one holder a job
  const std::string& dir = group.job.output_dir;
  for (auto it = output_locks_.begin(); it != output_locks_.end();) {
    it = it->second.second.expired() ? output_locks_.erase(it) : std::next(it);
  }
  auto held = output_locks_.find(dir);
  if (held != output_locks_.end()) {
    if (auto lock = held->second.second.lock()) {
      if (held->second.first != group.order.job_id) {
        return failed_precondition(output_dir_in_use(dir, held->second.first + " on node " + options_.node));
      }
      group.output_lock = std::move(lock);
      return Status::ok();
    }
  }
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string holder = group.order.job_id + " on node " + options_.node + " (host " + host + ", pid " +
                       std::to_string(::getpid()) + ")";
  COHORT_ASSIGN_OR_RETURN(OutputDirLock lock, OutputDirLock::acquire(dir, holder));
  group.output_lock = std::make_shared<OutputDirLock>(std::move(lock));
  output_locks_[dir] = {group.order.job_id, group.output_lock};
  return Status::ok();
}

Status Supervisor::claim_master_port(Group& group) {
  if (group.order.master_port != 0) return Status::ok();
  COHORT_ASSIGN_OR_RETURN(jobs::PortRange range,
                          effective_port_range(group.job.port_range, options_.port_range));
  COHORT_ASSIGN_OR_RETURN(PortClaim claim, PortClaim::claim(range, random_));
  group.order.master_port = claim.port();
  group.port = std::move(claim);
  return Status::ok();
}

void Supervisor::launch(const protocol::LaunchOrder& order) {
  Key key{order.job_id, order.attempt};
  if (groups_.count(key)) return;
  Group& group = groups_[key];
  group.order = order;
  Status started = start_group(group);
  if (started) started = claim_master_port(group);
  auto argv = started ? worker_argv(group) : Result<std::vector<std::string>>(started);
  if (!argv) {
    const std::string why = argv.status().message();
    spdlog::error("job {} attempt {}: cannot launch: {}", order.job_id, order.attempt, why);
    // Report each rank this node was given (none for a nonsensical order).
    const int per_node = ranks_here(order);
    const int node_rank = std::max(0, order.node_rank);
    for (int l = 0; l < per_node; ++l) {
      report_failure(order, jobs::assign_rank(node_rank, l, per_node).rank, why);
    }
    groups_.erase(key);
    return;
  }
  spdlog::info("job {} attempt {}: starting ranks {}..{} (node rank {})", order.job_id,
               order.attempt, group.workers.front().rank, group.workers.back().rank,
               order.node_rank);
  for (auto& worker : group.workers) spawn_worker(key, group, worker, *argv);
  if (group.port && sink_.started) {
    sink_.started(protocol::WorkersStarted{order.job_id, order.attempt, options_.node, group.port->port()});
  }
  drop_if_done(key);
}

void Supervisor::spawn_worker(const Key& key, Group& group, Worker& worker,
                              const std::vector<std::string>& argv) {
  const auto& order = group.order;
  const auto& job = group.job;
  LaunchContext ctx;
  ctx.job_id = order.job_id;
  ctx.node = options_.node;
  ctx.attempt = order.attempt;
  ctx.restart_count = order.restart_count;
  ctx.max_restarts = job.max_restarts;
  ctx.run_id = order.job_id;
  ctx.rank = worker.rank;
  ctx.world_size = order.world_size;
  ctx.local_rank = worker.local_rank;
  ctx.local_world_size = job.gpus_per_node;
  ctx.node_rank = order.node_rank;
  ctx.num_nodes = order.num_nodes;
  ctx.master_addr = order.master_addr;
  ctx.master_port = order.master_port;
  ctx.store_endpoint = group.store->address();
  ctx.store_token = order.store_token;
  ctx.progress_file = worker.progress_file;
  if (!options_.cpu_slots) ctx.gpu_indices = order.gpu_indices;
  ctx.devices = job.devices;
  ctx.job_env = job.env;
  ctx.inherited_env = current_environment();
  ctx.node_address = options_.node_address;
  ctx.node_interface = options_.node_interface;
  ctx.node_network_named = options_.node_network_named;
  if (auto s = validate_launch_context(ctx); !s) {
    worker.state = WorkerState::kExited;
    return report_failure(order, worker.rank, "bad launch order: " + s.message());
  }
  SpawnOptions spawn;
  spawn.argv = argv;
  spawn.env = build_worker_env(ctx);
  spawn.working_dir = job.working_dir;
  spawn.group = order.job_id + "-" + std::to_string(order.attempt);
  spawn.name = "rank-" + std::to_string(worker.rank);
  std::weak_ptr<bool> alive = alive_;
  auto logs = group.logs;
  int rank = worker.rank;
  int attempt = order.attempt;
  std::string job_id = order.job_id;
  // Launcher thread: the file write happens there (thread-safe, and it keeps
  // the line even if the agent's loop is busy), and so does the hand-over
  // for forwarding: the sink is thread-safe and bounded (log_forwarder.h),
  // where a post per line would queue a flood on the loop without bound.
  spawn.on_line = [logs, rank, attempt, job_id, line_sink = sink_.line](OutputStream, std::string_view line) {
    (void)logs->write_line(rank, line);
    if (line_sink) line_sink(job_id, protocol::LogLine{0, attempt, rank, std::string(line)});
  };
  spawn.on_exit = [this, alive, key, rank](const ExitStatus& status) {
    boost::asio::post(io_, [this, alive, key, rank, status] {
      if (alive.lock()) on_exit(key, rank, status);
    });
  };
  auto handle = launcher_.spawn(std::move(spawn));
  if (!handle) {
    worker.state = WorkerState::kExited;
    std::string why = "rank " + std::to_string(rank) + " could not start: " + handle.status().message();
    (void)logs->write_line(rank, why);
    return report_failure(order, rank, why);
  }
  worker.handle = *handle;
}

void Supervisor::on_exit(const Key& key, int rank, ExitStatus status) {
  auto it = groups_.find(key);
  if (it == groups_.end()) return;
  Group& group = it->second;
  for (auto& w : group.workers) {
    if (w.rank != rank || w.state == WorkerState::kExited) continue;
    protocol::WorkerExit exit;
    exit.job_id = key.first;
    exit.attempt = key.second;
    exit.node = options_.node;
    exit.rank = rank;
    exit.exit_code = status.exit_code;
    exit.signal = status.signal;
    exit.stopped = w.state == WorkerState::kStopping && w.failure.empty();
    exit.failure = w.failure;
    exit.last_lines = group.logs->last_lines(rank, kRootCauseLines);
    w.state = WorkerState::kExited;
    spdlog::info("job {} attempt {} rank {}: {}{}", key.first, key.second, rank, status.describe(),
                 exit.stopped ? " (stopped)" : "");
    sink_.exit(std::move(exit));
  }
  drop_if_done(key);
}

void Supervisor::drop_if_done(const Key& key) {
  auto it = groups_.find(key);
  if (it == groups_.end()) return;
  for (const auto& w : it->second.workers) {
    if (w.state != WorkerState::kExited) return;
  }
  groups_.erase(it);  // closes the store proxy and the log files
}

void Supervisor::stop_worker(const Group& group, Worker& worker) {
  if (worker.state == WorkerState::kExited || !worker.handle) return;
  worker.state = WorkerState::kStopping;
  worker.handle->stop(grace_of(group.job));
}

void Supervisor::stop(const std::string& job_id, int attempt, const std::string& reason) {
  for (auto& [key, group] : groups_) {
    if (key.first != job_id || (attempt >= 0 && key.second != attempt)) continue;
    spdlog::info("job {} attempt {}: stopping workers ({})", key.first, key.second, reason);
    for (auto& w : group.workers) {
      if (w.state == WorkerState::kRunning) stop_worker(group, w);
    }
  }
}

void Supervisor::stop_all(const std::string& reason) {
  std::vector<Key> keys;
  for (const auto& [key, group] : groups_) keys.push_back(key);
  for (const auto& key : keys) stop(key.first, key.second, reason);
}

std::vector<protocol::RunningWorker> Supervisor::fence(const std::string& reason) {
  std::vector<protocol::RunningWorker> stopped;
  for (auto& [key, group] : groups_) {
    for (auto& w : group.workers) {
      if (w.state != WorkerState::kRunning || !w.handle) continue;
      w.failure = reason;
      (void)group.logs->write_line(w.rank, "cohort: " + reason);
      stopped.push_back({key.first, key.second, w.rank, w.handle->pid()});
      stop_worker(group, w);
    }
  }
  return stopped;
}

void Supervisor::check_progress() {
  auto now = clock_.now();
  for (auto& [key, group] : groups_) {
    double hang_s = group.job.hang_timeout_s;
    if (hang_s <= 0) continue;
    auto limit = std::chrono::duration<double>(hang_s);
    for (auto& w : group.workers) {
      if (w.state != WorkerState::kRunning) continue;
      int64_t m = mtime_ns(w.progress_file);
      if (m != w.progress_mtime_ns) {
        w.progress_mtime_ns = m;
        w.last_progress = now;
        continue;
      }
      if (now - w.last_progress <= limit) continue;
      w.failure = "hung: no progress report for " + std::to_string(int(hang_s)) +
                  " s (hang_timeout; workers report progress by touching $COHORT_PROGRESS_FILE "
                  "or setting the store key cohort/progress/<RANK>)";
      spdlog::warn("job {} attempt {} rank {}: {}", key.first, key.second, w.rank, w.failure);
      (void)group.logs->write_line(w.rank, "cohort: " + w.failure);
      stop_worker(group, w);
    }
  }
}

void Supervisor::note_progress(const std::string& job_id, int attempt, int rank) {
  auto it = groups_.find({job_id, attempt});
  if (it == groups_.end()) return;
  for (auto& w : it->second.workers) {
    if (w.rank == rank) w.last_progress = clock_.now();
  }
}

std::vector<protocol::RunningWorker> Supervisor::running() const {
  std::vector<protocol::RunningWorker> out;
  for (const auto& [key, group] : groups_) {
    for (const auto& w : group.workers) {
      if (w.state != WorkerState::kExited && w.handle) {
        out.push_back({key.first, key.second, w.rank, w.handle->pid()});
      }
    }
  }
  return out;
}

size_t Supervisor::live_workers() const { return running().size(); }

const protocol::JobControl* Supervisor::job_of(const std::string& job_id, int attempt) const {
  auto it = groups_.find({job_id, attempt});
  return it == groups_.end() ? nullptr : &it->second.job;
}

}  // namespace cohort::agent
