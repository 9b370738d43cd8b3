// `cohort coordinator [--listen ADDR] [--state-dir DIR] [--keys DIR] [--insecure]
//                     [--http HOST:PORT] [--http-token TOKEN]
//                     [--max-gpus-per-key N] [--max-queued-per-key N]`
#include <cstdlib>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <spdlog/spdlog.h>

#include "base/env_knobs.h"
#include "cli/commands.h"
#include "cli/coordinator_address.h"
#include "cli/global_flags.h"
#include "coordinator/coordinator.h"

namespace cohort::cli {
namespace {

struct CoordinatorArgs {
  std::string listen = "tcp://127.0.0.1:7070";
  std::string state_dir;
  std::string keys;
  bool insecure = false;
  double heartbeat_timeout_s = 2.5;
  std::string http;
  std::string http_token;
  int max_gpus_per_key = -1;
  int max_queued_per_key = -1;
};

int run_coordinator(const CoordinatorArgs& args) {
  coordinator::CoordinatorOptions options;
  auto listen = normalize_endpoint(args.listen, "--listen");
  if (!listen) {
    spdlog::error("{}", listen.status().message());
    return kExitUsage;
  }
  options.listen = *listen;
  options.state_dir = args.state_dir;
  options.insecure = args.insecure;
  options.http_listen = args.http;
  options.http_token = args.http_token;
  if (options.http_token.empty()) {
    if (const char* env = read_env_knob(EnvKnob::kHttpToken)) options.http_token = env;
  }
  options.max_gpus_per_key = args.max_gpus_per_key;
  options.max_queued_per_key = args.max_queued_per_key;
  options.heartbeat_timeout = std::chrono::milliseconds(int64_t(args.heartbeat_timeout_s * 1000));
  options.heartbeat_interval = std::min(std::chrono::milliseconds(500), options.heartbeat_timeout / 4);
  const std::string keys = args.keys.empty() ? global_flags().keys : args.keys;
  if (!keys.empty()) {
    auto security = protocol::load_server_security(keys);
    if (!security) {
      spdlog::error("{}", security.status().message());
      return kExitUsage;
    }
    options.security = *security;
  }
  boost::asio::io_context io;
  auto coordinator = coordinator::Coordinator::start(io, options);
  if (!coordinator) {
    spdlog::error("cannot start the coordinator: {}", coordinator.status().message());
    return kExitUsage;
  }
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code&, int sig) {
    spdlog::info("coordinator: signal {}, stopping (running jobs carry on; state is kept)", sig);
    io.stop();
  });
  io.run();
  return kExitOk;
}

}  // namespace

Command add_coordinator_command(CLI::App& root) {
  auto args = std::make_shared<CoordinatorArgs>();
  CLI::App* app = root.add_subcommand("coordinator", "run the coordinator daemon");
  app->add_option("--listen", args->listen, "address to bind: tcp://HOST:PORT, HOST:PORT or ipc://PATH")
      ->capture_default_str();
  app->add_option("--state-dir", args->state_dir, "keep jobs and nodes in DIR/coordinator.db (SQLite)");
  app->add_option("--keys", args->keys, "CURVE key directory from `cohort keygen` (required off loopback)");
  app->add_option("--http", args->http, "serve the HTTP API (web page, JSON, /metrics) on HOST:PORT");
  app->add_option("--http-token", args->http_token,
                  "allow POST /api/jobs/<id>/cancel with this bearer token (default: $COHORT_HTTP_TOKEN; "
                  "none: read-only)");
  app->add_flag("--insecure", args->insecure, "allow a non-loopback address without CURVE keys");
  app->add_option("--heartbeat-timeout", args->heartbeat_timeout_s,
                  "seconds without heartbeats before a node is lost")->capture_default_str();
  // Slurm's association limits; a key's line in authorized_clients
  // ("KEY name=alice max_gpus=16 max_queued=50") overrides them for that key.
  app->add_option("--max-gpus-per-key", args->max_gpus_per_key,
                  "GPUs the running jobs of one client key may hold at once (without --keys: of the local "
                  "user); default: no limit")
      ->check(CLI::Range(0, 1000000));
  app->add_option("--max-queued-per-key", args->max_queued_per_key,
                  "jobs of one client key that may wait in the queue at once; default: no limit")
      ->check(CLI::Range(0, 1000000));
  return {app, [args] { return run_coordinator(*args); }};
}

}  // namespace cohort::cli
