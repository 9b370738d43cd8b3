// Control-plane benchmark: one coordinator and N simulated nodes (agents
// with --fake-gpus 8) over real loopback ZeroMQ sockets. The coordinator
// runs in a child process of its own (forked before any thread exists), so
// its resident memory and descriptors are its own, as on a real cluster.
// The simulated agents share what a simulation can share: this process, one
// ZeroMQ context and a few Asio loop threads (--loops, default 4), each
// agent living on one of them. Each agent still has its own DEALER
// connection, heartbeats, supervisor, log files and store port.
//
// Measures, for a command job spanning every node (N × 8 ranks):
//   placement  submit → every rank spawned by its agent
//   complete   every rank exits 0 → the coordinator reports the job done
//   relaunch   one worker killed (SIGKILL) → every rank of the next attempt spawned
//   detect     one agent dies (socket closed, heartbeats stop) → node marked lost
// Workers are FakeProcessLauncher processes (`--launcher fake`), so the
// figures are the control plane's own. `--launcher posix` runs real
// processes (`sh` that writes its pid to COHORT_PROGRESS_FILE, then sleeps):
// "spawned" means every rank has written its file, the killed worker gets a
// real SIGKILL, and "complete" is cancel → every worker stopped.
//
// It also reports the coordinator's resident set once every node is
// registered and at its peak, its open descriptors, and this process's
// threads and descriptors.
//
//   control_plane_bench [--nodes 16,64,128] [--launcher fake|posix] [--loops 4]
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <spdlog/spdlog.h>
#include <zmq.hpp>

#include "agent/agent.h"
#include "agent/fake_process_launcher.h"
#include "coordinator/coordinator.h"
#include "coordinator/open_files_limit.h"
#include "jobs/load.h"
#include "protocol/client.h"
#include "protocol/transport.h"

namespace {

using namespace cohort;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

template <typename F>
bool wait_for(F condition, std::chrono::milliseconds timeout = 120s) {
  auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

struct Row {
  int nodes = 0;
  double placement_ms = 0, complete_ms = 0, relaunch_ms = 0, detect_ms = 0;
  double coordinator_idle_mb = 0, coordinator_peak_mb = 0;  // registered; peak over the run
  int coordinator_fds = 0;                                  // with the job running
  int bench_threads = 0;          // the simulated agents' process, every node registered
  int running_threads = 0, bench_fds = 0;  // ... with the job running (a store port per node)
};

// A number from /proc/PID/status ("VmRSS" in kB, "Threads").
double status_field(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1));
  }
  return 0;
}

double status_mb(pid_t pid, const std::string& field) { return status_field(pid, field) / 1024.0; }

int open_fds(pid_t pid) {
  std::error_code ec;
  int n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

// The coordinator in a child process: forked before this process has any
// thread, it writes its endpoint to `out_fd`, then serves until SIGTERM (or
// until the bench dies).
[[noreturn]] void run_coordinator_child(int out_fd, bool posix) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  boost::asio::io_context io;
  coordinator::CoordinatorOptions co;
  co.listen = "tcp://127.0.0.1:0";
  co.tick_interval = 20ms;
  // 1,024 real forks from one process on a small box starve heartbeats for
  // seconds (every fork takes the one address space's lock); a real node
  // forks only its own 8. Posix mode therefore measures with a long
  // timeout; fake mode keeps the default, which "detect" measures.
  if (posix) co.heartbeat_timeout = 60s;
  auto coordinator = coordinator::Coordinator::start(io, co);
  std::string endpoint = coordinator ? (*coordinator)->endpoint() : "";
  if (!coordinator) std::fprintf(stderr, "coordinator: %s\n", coordinator.status().message().c_str());
  endpoint += "\n";
  if (::write(out_fd, endpoint.data(), endpoint.size()) < 0 || !coordinator) ::_exit(1);
  ::close(out_fd);
  boost::asio::signal_set stop(io, SIGTERM);
  stop.async_wait([&](const boost::system::error_code&, int) { io.stop(); });
  io.run();
  coordinator->reset();
  ::_exit(0);
}

class SimulatedCluster {
 public:
  SimulatedCluster(int nodes, bool posix, int loops) : posix_(posix) {
    int pipe_fds[2];
    if (::pipe(pipe_fds) != 0) throw std::runtime_error("pipe");
    std::fflush(nullptr);  // else the child's copy of the buffers prints twice
    coordinator_pid_ = ::fork();
    if (coordinator_pid_ == 0) {
      ::close(pipe_fds[0]);
      run_coordinator_child(pipe_fds[1], posix);
    }
    ::close(pipe_fds[1]);
    std::string endpoint;
    char c;
    while (::read(pipe_fds[0], &c, 1) == 1 && c != '\n') endpoint += c;
    ::close(pipe_fds[0]);
    if (endpoint.empty()) throw std::runtime_error("the coordinator did not start");

    auto zmq = protocol::make_zmq_context();
    // One context for every simulated agent: each holds its DEALER and a
    // connection monitor (two PAIR sockets), while a context allows 1,023
    // sockets by default.
    zmq->set(zmq::ctxopt::max_sockets, 4 * nodes + 64);
    loops_.resize(std::max(1, loops));
    for (auto& loop : loops_) loop.io = std::make_unique<boost::asio::io_context>();
    nodes_.resize(nodes);
    for (int i = 0; i < nodes; ++i) {
      agent::AgentOptions ao;
      ao.coordinator = endpoint;
      char name[32];
      std::snprintf(name, sizeof name, "node-%04d", i);
      ao.name = name;
      ao.prober = agent::make_fake_prober(8);
      ao.worker_binary = "/bin/true";  // command jobs only; keeps the start quiet
      if (posix) {
        ao.launcher = agent::make_posix_launcher();
      } else {
        auto fake = std::make_shared<agent::FakeProcessLauncher>();
        fake->set_exit_on_stop(true);
        launchers_.push_back(fake);
        ao.launcher = fake;
      }
      ao.zmq_context = zmq;
      auto& node = nodes_[i];
      node.io = loops_[i % loops_.size()].io.get();
      // Created before the loops run; each agent is then used only on its loop.
      node.agent = std::move(agent::Agent::start(*node.io, ao).value());
    }
    for (auto& loop : loops_) {
      loop.thread = std::thread([io = loop.io.get()] {
        auto guard = boost::asio::make_work_guard(*io);
        io->run();
      });
    }
    client_ = std::move(protocol::Client::connect(endpoint, {}).value());
  }

  ~SimulatedCluster() {
    client_.reset();
    for (auto& loop : loops_) {
      loop.io->stop();
      loop.thread.join();
    }
    nodes_.clear();
    ::kill(coordinator_pid_, SIGTERM);
    int status = 0;
    ::waitpid(coordinator_pid_, &status, 0);
  }

  size_t spawned() const {
    size_t n = 0;
    for (const auto& l : launchers_) n += l->spawn_count();
    return n;
  }

  std::string job_state(const std::string& id) {
    auto r = client_->request<protocol::JobList>(protocol::JobQuery{id, 0, {}}, 5s);
    return r && !r->jobs.empty() ? r->jobs.front().state : "";
  }

  int alive_nodes() {
    auto r = client_->request<protocol::NodeList>(protocol::NodeQuery{}, 5s);
    int n = 0;
    if (r) for (const auto& node : r->nodes) n += node.state == "alive";
    return n;
  }

  // Ranks of `attempt` that have started and written their pid.
  static size_t started(const std::string& output_dir, int attempt, size_t ranks) {
    size_t n = 0;
    for (size_t r = 0; r < ranks; ++r) {
      std::string path = output_dir + "/progress/attempt-" + std::to_string(attempt) + "/rank-" + std::to_string(r);
      struct stat st;
      n += ::stat(path.c_str(), &st) == 0 && st.st_size > 0;
    }
    return n;
  }

  Row measure_posix(jobs::JobSpec spec, int nodes) {
    Row row;
    row.nodes = nodes;
    size_t ranks = size_t(nodes) * 8;
    spec.command.argv = {"sh", "-c", "echo $$ > $COHORT_PROGRESS_FILE; exec sleep 600"};
    const jobs::JobSection& job = spec.job;
    auto t0 = Clock::now();
    auto id = client_->request<protocol::SubmitReply>(protocol::SubmitJob{jobs::to_toml(spec)}, 10s)
                  .value()
                  .job_id;
    wait_for([&] { return started(job.output_dir, 0, ranks) == ranks; });
    row.placement_ms = ms_since(t0);
    row.coordinator_fds = open_fds(coordinator_pid_);
    row.bench_fds = open_fds(::getpid());
    row.running_threads = int(status_field(::getpid(), "Threads"));
    std::ifstream pid_file(job.output_dir + "/progress/attempt-0/rank-0");
    pid_t victim = 0;
    pid_file >> victim;
    auto t1 = Clock::now();
    ::kill(victim, SIGKILL);
    wait_for([&] { return started(job.output_dir, 1, ranks) == ranks; });
    row.relaunch_ms = ms_since(t1);
    auto t2 = Clock::now();
    (void)client_->request<protocol::Ack>(protocol::CancelJob{id}, 10s);
    wait_for([&] { return job_state(id) == "cancelled"; });
    row.complete_ms = ms_since(t2);
    std::error_code ec;
    std::filesystem::remove_all(job.output_dir, ec);
    return row;
  }

  Row measure(int nodes) {
    Row row;
    row.nodes = nodes;
    wait_for([&] { return alive_nodes() == nodes; }, 300s);
    row.coordinator_idle_mb = status_mb(coordinator_pid_, "VmRSS");
    row.bench_threads = int(status_field(::getpid(), "Threads"));
    Row measured = measure_job(nodes);
    measured.coordinator_idle_mb = row.coordinator_idle_mb;
    measured.bench_threads = row.bench_threads;
    measured.coordinator_peak_mb = status_mb(coordinator_pid_, "VmHWM");
    return measured;
  }

  Row measure_job(int nodes) {
    Row row;
    row.nodes = nodes;
    jobs::JobSpec spec;
    jobs::JobSection& job = spec.job;
    job.name = "bench";
    job.kind = jobs::JobKind::kCommand;
    job.devices = jobs::DeviceVisibility::kNode;
    job.nodes = {nodes, nodes};
    job.gpus_per_node = 8;
    job.max_restarts = 1;
    job.stop_grace_s = 1;
    job.output_dir = "/tmp/cohort-bench-" + std::to_string(::getpid()) + "-" + std::to_string(nodes);
    job.working_dir = "/tmp";
    spec.command.argv = {"true"};
    size_t ranks = size_t(nodes) * 8;

    if (posix_) return measure_posix(spec, nodes);
    auto t0 = Clock::now();
    auto id = client_->request<protocol::SubmitReply>(protocol::SubmitJob{jobs::to_toml(spec)}, 10s)
                  .value()
                  .job_id;
    wait_for([&] { return spawned() == ranks; });
    row.placement_ms = ms_since(t0);
    row.coordinator_fds = open_fds(coordinator_pid_);
    row.bench_fds = open_fds(::getpid());
    row.running_threads = int(status_field(::getpid(), "Threads"));

    // Kill one worker: every rank must be stopped and relaunched.
    auto t1 = Clock::now();
    launchers_[0]->exit(0, agent::ExitStatus::killed(9));
    wait_for([&] { return spawned() == 2 * ranks; });
    row.relaunch_ms = ms_since(t1);

    auto t2 = Clock::now();
    for (auto& l : launchers_) {
      for (size_t i = 0; i < l->spawn_count(); ++i) l->exit(i, agent::ExitStatus::exited(0));
    }
    wait_for([&] { return job_state(id) == "succeeded"; });
    row.complete_ms = ms_since(t2);

    // An agent dies: its socket closes and its heartbeats stop.
    auto t3 = Clock::now();
    auto& victim = nodes_.back();
    std::atomic<bool> gone{false};
    boost::asio::post(*victim.io, [&victim, &gone] {
      victim.agent.reset();
      gone = true;
    });
    wait_for([&] { return gone.load(); });
    wait_for([&] { return alive_nodes() == nodes - 1; });
    row.detect_ms = ms_since(t3);
    return row;
  }

 private:
  bool posix_;
  pid_t coordinator_pid_ = -1;
  std::vector<std::shared_ptr<agent::FakeProcessLauncher>> launchers_;
  struct Loop {
    std::unique_ptr<boost::asio::io_context> io;
    std::thread thread;
  };
  std::vector<Loop> loops_;
  struct SimulatedNode {
    boost::asio::io_context* io = nullptr;  // one of loops_
    std::unique_ptr<agent::Agent> agent;
  };
  std::vector<SimulatedNode> nodes_;
  std::unique_ptr<protocol::Client> client_;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes = {16, 64, 128};
  bool posix = false;
  int loops = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--nodes") {
      sizes.clear();
      std::stringstream ss(value);
      std::string part;
      while (std::getline(ss, part, ',')) sizes.push_back(std::stoi(part));
    } else if (flag == "--launcher") {
      posix = value == "posix";
    } else if (flag == "--loops") {
      loops = std::stoi(value);
    }
  }
  spdlog::set_level(spdlog::level::warn);
  // The simulated agents hold about a dozen descriptors per node in this one
  // process (the coordinator raises its own limit as it starts).
  auto limit = coordinator::raise_open_files_limit();
  if (limit) std::fprintf(stderr, "open files: soft limit %llu\n", (unsigned long long)limit->after);
  if (posix) {
    std::printf("| nodes | ranks | submit → all ranks started (ms) | kill -9 of a worker → all ranks "
                "restarted (ms) | cancel → all stopped (ms) |");
  } else {
    std::printf("| nodes | ranks | submit → all ranks spawned (ms) | worker SIGKILL → all ranks relaunched (ms) "
                "| all exit 0 → job done (ms) | agent death → node lost (ms) |");
  }
  std::printf(" coordinator RSS, registered / peak (MB) | coordinator fds | bench threads, registered / running | bench fds |\n"
              "|---|---|---|---|---|%s---|---|---|---|\n", posix ? "" : "---|");
  for (int n : sizes) {
    SimulatedCluster cluster(n, posix, loops);
    Row r = cluster.measure(n);
    if (posix) {
      std::printf("| %d | %d | %.0f | %.0f | %.0f |", n, n * 8, r.placement_ms, r.relaunch_ms, r.complete_ms);
    } else {
      std::printf("| %d | %d | %.1f | %.1f | %.1f | %.0f |", n, n * 8, r.placement_ms, r.relaunch_ms,
                  r.complete_ms, r.detect_ms);
    }
    std::printf(" %.1f / %.1f | %d | %d / %d | %d |\n", r.coordinator_idle_mb, r.coordinator_peak_mb,
                r.coordinator_fds, r.bench_threads, r.running_threads, r.bench_fds);
    std::fflush(stdout);
  }
  return 0;
}
