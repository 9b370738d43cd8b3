// `cohort agent [--coordinator ADDR] [--name NODE] [--advertise-address ADDR] [--interface IF]
//               [--fake-gpus N | --cpu-slots N]`
#include <cstdlib>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <spdlog/spdlog.h>

#include "base/env_knobs.h"
#include "agent/agent.h"
#include "cli/commands.h"
#include "cli/coordinator_address.h"
#include "cli/global_flags.h"
#include "protocol/client.h"

namespace cohort::cli {
namespace {

struct AgentArgs {
  std::string coordinator;
  std::string name;
  std::string address;
  std::string interface;
  std::string keys;
  std::string worker_binary;
  std::string port_range;
  int fake_gpus = 0;
  int cpu_slots = 0;
  std::vector<int> gpus;
  std::string containment = "auto";
};

int run_agent(const AgentArgs& args) {
  agent::AgentOptions options;
  auto endpoint = coordinator_endpoint(args.coordinator.empty() ? global_flags().coordinator : args.coordinator);
  if (!endpoint) {
    spdlog::error("{}", endpoint.status().message());
    return kExitUsage;
  }
  options.coordinator = *endpoint;
  options.name = args.name;
  options.address = args.address;
  options.interface = args.interface;
  options.worker_binary = args.worker_binary;
  if (!args.port_range.empty()) {
    std::string why;
    if (!jobs::parse_port_range(args.port_range, &options.port_range, &why)) {
      spdlog::error("--port-range: {}", why);
      return kExitUsage;
    }
  }
  std::string keys = args.keys.empty() ? global_flags().keys : args.keys;
  if (keys.empty()) {
    if (const char* env = read_env_knob(EnvKnob::kKeys)) keys = env;
  }
  if (!keys.empty()) {
    auto security = protocol::load_client_security(keys, protocol::Role::kAgent);
    if (!security) {
      spdlog::error("{}", security.status().message());
      return kExitUsage;
    }
    options.security = *security;
  }
  if (args.fake_gpus > 0) {
    options.prober = agent::make_fake_prober(args.fake_gpus);
  } else if (args.cpu_slots > 0) {
    options.prober = agent::make_cpu_slots_prober(args.cpu_slots);
  } else {
    options.prober = agent::make_system_prober();
  }
  if (!args.gpus.empty()) options.prober = agent::make_selected_prober(std::move(options.prober), args.gpus);
  agent::LauncherOptions lo;
  lo.owner = args.name.empty() ? "agent" : args.name;
  auto containment = agent::parse_containment(args.containment);
  if (containment) lo.containment = *containment;
  auto launcher = containment ? agent::make_posix_launcher(lo)
                              : Result<std::unique_ptr<agent::ProcessLauncher>>(containment.status());
  if (!launcher) {
    spdlog::error("--containment: {}", launcher.status().message());
    return kExitUsage;
  }
  options.launcher = std::move(*launcher);
  boost::asio::io_context io;
  auto agent = agent::Agent::start(io, options);
  if (!agent) {
    spdlog::error("cannot start the agent: {}", agent.status().message());
    return kExitUsage;
  }
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  std::function<void()> wait_signal = [&] {
    signals.async_wait([&](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      static bool stopping = false;
      if (stopping) {
        spdlog::warn("agent: second signal, exiting now (workers are killed with the agent)");
        io.stop();
        return;
      }
      stopping = true;
      spdlog::info("agent: signal {}, stopping workers", sig);
      (*agent)->shutdown([&] { io.stop(); });
      wait_signal();
    });
  };
  wait_signal();
  io.run();
  return kExitOk;
}

}  // namespace

Command add_agent_command(CLI::App& root) {
  auto args = std::make_shared<AgentArgs>();
  CLI::App* app = root.add_subcommand("agent", "run a node agent");
  app->add_option("--coordinator", args->coordinator,
                  "coordinator address, tcp://HOST:PORT or HOST:PORT (default: $COHORT_COORDINATOR or "
                  "tcp://127.0.0.1:7070)");
  app->add_option("--name", args->name, "node name (default: the host name)");
  app->add_option("--advertise-address,--address", args->address,
                  "address other nodes reach this one at: registered with the coordinator, MASTER_ADDR "
                  "when rank 0 runs here, where Gloo listens (default: this host's address on the route "
                  "to the coordinator; 127.0.0.1 for a loopback coordinator)");
  app->add_option("--interface", args->interface,
                  "network interface for the workers' collectives (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME) "
                  "and, without --advertise-address, its address (default: the one holding the address)");
  app->add_option("--keys", args->keys, "CURVE key directory from `cohort keygen` (default: $COHORT_KEYS)");
  app->add_option("--worker-binary", args->worker_binary,
                  "cohort-worker for train/infer jobs (default: next to this program)");
  app->add_option("--port-range", args->port_range,
                  "LO-HI: the ports MASTER_PORT is chosen from for jobs whose rank 0 runs here (default "
                  "29500-30499; a job's port_range is narrowed to it)");
  auto fake = app->add_option("--fake-gpus", args->fake_gpus, "pretend to have N GPUs (tests)");
  auto cpu = app->add_option("--cpu-slots", args->cpu_slots, "offer N CPU worker slots instead of GPUs");
  app->add_option("--gpus", args->gpus, "offer only these GPUs (nvidia-smi indices, e.g. --gpus 0,1)")
      ->delimiter(',')
      ->excludes(cpu);
  fake->excludes(cpu);
  app->add_option("--containment", args->containment,
                  "how workers are kept from outliving their job: auto (cgroup v2 where the host delegates "
                  "it, else subreaper), cgroup (fail without it), subreaper");
  return {app, [args] { return run_agent(*args); }};
}

}  // namespace cohort::cli
