// run_embedded: coordinator + agent on a background loop, client in front.
#include "cluster/embedded_cluster.h"

#include <cstdio>
#include <filesystem>
#include <future>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "agent/agent.h"
#include "agent/output_dir_lock.h"
#include "coordinator/coordinator.h"
#include "jobs/load.h"
#include "protocol/client.h"
#include "protocol/job_watch.h"

namespace cohort::cluster {

namespace {

std::unique_ptr<agent::GpuProber> pick_prober(const EmbeddedRunOptions& options) {
  if (options.fake_gpus > 0) return agent::make_fake_prober(options.fake_gpus);
  if (options.cpu_slots > 0) return agent::make_cpu_slots_prober(options.cpu_slots);
  auto system = agent::make_system_prober();
  auto gpus = system->probe();
  if (gpus && !gpus->empty()) return system;
  spdlog::info("no GPU found: running {} worker(s) on CPU slots", options.spec.job.gpus_per_node);
  return agent::make_cpu_slots_prober(options.spec.job.gpus_per_node);
}

}  // namespace

Result<protocol::JobInfo> run_embedded(const EmbeddedRunOptions& options) {
  boost::asio::io_context io;
  auto work = boost::asio::make_work_guard(io);
  std::unique_ptr<coordinator::Coordinator> coord;
  std::unique_ptr<agent::Agent> agent;

  // One node: a job that needs more GPUs than it has would wait forever.
  std::shared_ptr<agent::GpuProber> prober = pick_prober(options);
  COHORT_ASSIGN_OR_RETURN(auto gpus, prober->probe());
  const int per_node = options.spec.job.gpus_per_node;
  if (int(gpus.size()) < per_node) {
    return failed_precondition(
        "the job needs " + std::to_string(per_node) + " GPUs per node and this machine has " +
        std::to_string(gpus.size()) + ": use --set job.gpus_per_node=" + std::to_string(gpus.size()) +
        ", or --cpu-slots " + std::to_string(per_node) + " to run on CPU");
  }

  // One run per folder: a second `cohort run` on a folder another writes
  // would remove that run's state database below and interleave its
  // checkpoints. The agent takes the lock itself at launch (output_dir_lock.h).
  if (std::string holder = agent::OutputDirLock::holder_of(options.spec.job.output_dir); !holder.empty()) {
    return failed_precondition(agent::output_dir_in_use(options.spec.job.output_dir, holder));
  }

  coordinator::CoordinatorOptions co;
  co.listen = "tcp://127.0.0.1:0";
  co.state_dir =
      options.state_dir.empty() ? options.spec.job.output_dir + "/.cohort" : options.state_dir;
  co.heartbeat_timeout = std::chrono::seconds(10);  // one process: no node is lost
  co.http_listen = options.http_listen;
  co.http_token = options.http_token;
  // Each run starts from a clean slate; the database of the last run stays
  // for inspection until the next one.
  for (const char* suffix : {"", "-wal", "-shm"}) {
    std::error_code ec;
    std::filesystem::remove(co.state_dir + "/coordinator.db" + suffix, ec);
  }
  COHORT_ASSIGN_OR_RETURN(coord, coordinator::Coordinator::start(io, co));
  if (int port = coord->http_port(); port > 0) {
    // Said whatever the log level: with port 0 this is the only way to learn it.
    auto host = co.http_listen.substr(0, co.http_listen.rfind(':'));
    std::fprintf(stderr, "cohort: web page on http://%s:%d/ (%s)\n", host.c_str(), port,
                 co.http_token.empty() ? "read-only" : "cancel allowed with the token");
  }

  agent::AgentOptions ao;
  ao.coordinator = coord->endpoint();
  ao.name = "local";
  ao.address = "127.0.0.1";
  ao.fence = false;  // coordinator and agent share one loop: never cut off
  ao.prober = prober;
  agent::LauncherOptions lo;
  lo.containment = options.containment;
  lo.owner = "run";
  COHORT_ASSIGN_OR_RETURN(ao.launcher, agent::make_posix_launcher(lo));
  ao.worker_binary = options.worker_binary;
  COHORT_ASSIGN_OR_RETURN(agent, agent::Agent::start(io, ao));

  std::thread loop([&io] { io.run(); });
  auto finish = [&] {
    std::promise<void> stopped;
    boost::asio::post(io, [&] { agent->shutdown([&] { stopped.set_value(); }); });
    stopped.get_future().wait();
    work.reset();
    io.stop();
    loop.join();
  };

  auto client = protocol::Client::connect(coord->endpoint(), {});
  if (!client) {
    finish();
    return client.status();
  }
  auto submitted = (*client)->request<protocol::SubmitReply>(
      protocol::SubmitJob{jobs::to_toml(options.spec)}, std::chrono::seconds(10));
  if (!submitted) {
    finish();
    return submitted.status();
  }
  protocol::WatchOptions watch;
  watch.interrupt = options.interrupt;
  watch.on_line = options.on_line;
  watch.on_poll = options.on_poll;
  auto result = protocol::watch_job(**client, submitted->job_id, watch);
  finish();
  return result;
}

}  // namespace cohort::cluster
