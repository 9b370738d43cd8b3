// Control-plane benchmark: one coordinator and N simulated nodes (agents
// with --fake-gpus 8) in this process, each daemon on its own loop thread
// as on a real cluster, over real loopback ZeroMQ sockets.
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
//   control_plane_bench [--nodes 16,64,128] [--launcher fake|posix]
#include <signal.h>
#include <sys/stat.h>

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
#include <spdlog/spdlog.h>

#include "agent/agent.h"
#include "agent/fake_process_launcher.h"
#include "coordinator/coordinator.h"
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
};

class SimulatedCluster {
 public:
  SimulatedCluster(int nodes, bool posix) : posix_(posix) {
    auto zmq = protocol::make_zmq_context();
    coordinator::CoordinatorOptions co;
    co.listen = "tcp://127.0.0.1:0";
    co.tick_interval = 20ms;
    co.zmq_context = zmq;
    // 1,024 real forks from one process on a small box starve heartbeats for
    // seconds (every fork takes the one address space's lock); a real node
    // forks only its own 8. Posix mode therefore measures with a long
    // timeout; fake mode keeps the default, which "detect" measures.
    if (posix) co.heartbeat_timeout = 60s;
    coordinator_ = std::move(coordinator::Coordinator::start(io_, co).value());
    nodes_.resize(nodes);
    for (int i = 0; i < nodes; ++i) {
      agent::AgentOptions ao;
      ao.coordinator = coordinator_->endpoint();
      char name[32];
      std::snprintf(name, sizeof name, "node-%04d", i);
      ao.name = name;
      ao.prober = agent::make_fake_prober(8);
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
      node.io = std::make_unique<boost::asio::io_context>();
      node.agent = std::move(agent::Agent::start(*node.io, ao).value());
      node.thread = std::thread([io = node.io.get()] {
        auto guard = boost::asio::make_work_guard(*io);
        io->run();
      });
    }
    thread_ = std::thread([this] {
      auto guard = boost::asio::make_work_guard(io_);
      io_.run();
    });
    client_ = std::move(protocol::Client::connect(coordinator_->endpoint(), {}).value());
  }

  ~SimulatedCluster() {
    for (auto& node : nodes_) {
      node.io->stop();
      node.thread.join();
      node.agent.reset();
    }
    io_.stop();
    thread_.join();
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

  Row measure_posix(protocol::JobControl job, int nodes) {
    Row row;
    row.nodes = nodes;
    size_t ranks = size_t(nodes) * 8;
    job.argv = {"sh", "-c", "echo $$ > $COHORT_PROGRESS_FILE; exec sleep 600"};
    auto t0 = Clock::now();
    auto id = client_->request<protocol::SubmitReply>(protocol::SubmitJob{job}, 10s).value().job_id;
    wait_for([&] { return started(job.output_dir, 0, ranks) == ranks; });
    row.placement_ms = ms_since(t0);
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
    wait_for([&] { return alive_nodes() == nodes; });
    protocol::JobControl job;
    job.name = "bench";
    job.kind = jobs::JobKind::kCommand;
    job.nodes_min = job.nodes_max = nodes;
    job.gpus_per_node = 8;
    job.max_restarts = 1;
    job.stop_grace_s = 1;
    job.output_dir = "/tmp/cohort-bench-" + std::to_string(::getpid()) + "-" + std::to_string(nodes);
    job.working_dir = "/tmp";
    job.argv = {"true"};
    size_t ranks = size_t(nodes) * 8;

    if (posix_) return measure_posix(job, nodes);
    auto t0 = Clock::now();
    auto id = client_->request<protocol::SubmitReply>(protocol::SubmitJob{job}, 10s).value().job_id;
    wait_for([&] { return spawned() == ranks; });
    row.placement_ms = ms_since(t0);

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
    boost::asio::post(*victim.io, [&victim] { victim.agent.reset(); });
    wait_for([&] { return alive_nodes() == nodes - 1; });
    row.detect_ms = ms_since(t3);
    return row;
  }

 private:
  bool posix_;
  boost::asio::io_context io_;
  std::unique_ptr<coordinator::Coordinator> coordinator_;
  std::vector<std::shared_ptr<agent::FakeProcessLauncher>> launchers_;
  struct SimulatedNode {
    std::unique_ptr<boost::asio::io_context> io;
    std::unique_ptr<agent::Agent> agent;
    std::thread thread;
  };
  std::vector<SimulatedNode> nodes_;
  std::thread thread_;
  std::unique_ptr<protocol::Client> client_;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> sizes = {16, 64, 128};
  bool posix = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--nodes") {
      sizes.clear();
      std::stringstream ss(value);
      std::string part;
      while (std::getline(ss, part, ',')) sizes.push_back(std::stoi(part));
    } else if (flag == "--launcher") {
      posix = value == "posix";
    }
  }
  spdlog::set_level(spdlog::level::warn);
  if (posix) {
    std::printf("| nodes | ranks | submit → all ranks started (ms) | kill -9 of a worker → all ranks "
                "restarted (ms) | cancel → all stopped (ms) |\n|---|---|---|---|---|\n");
  } else {
    std::printf("| nodes | ranks | submit → all ranks spawned (ms) | worker SIGKILL → all ranks relaunched (ms) "
                "| all exit 0 → job done (ms) | agent death → node lost (ms) |\n|---|---|---|---|---|---|\n");
  }
  for (int n : sizes) {
    SimulatedCluster cluster(n, posix);
    Row r = cluster.measure(n);
    if (posix) {
      std::printf("| %d | %d | %.0f | %.0f | %.0f |\n", n, n * 8, r.placement_ms, r.relaunch_ms,
                  r.complete_ms);
    } else {
      std::printf("| %d | %d | %.1f | %.1f | %.1f | %.0f |\n", n, n * 8, r.placement_ms, r.relaunch_ms,
                  r.complete_ms, r.detect_ms);
    }
    std::fflush(stdout);
  }
  return 0;
}
