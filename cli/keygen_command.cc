// `cohort keygen DIR [--role agent|client] [--authorize COORD]`: CURVE keys.
// Without --role: the coordinator's folder (its secret stays on its host).
// With --role: a key for one agent or client, authorized in COORD's folder;
// an agent key restricted to --nodes, a client key with its owner's --name
// and limits (--max-gpus, --max-queued; protocol/security.h).
// With --json: {"dir", "role" (coordinator|agent|client), "public_key_file",
// "public_key", "authorized_in" (the folder, or null)} instead of the advice.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "cli/commands.h"
#include "cli/global_flags.h"
#include "protocol/security.h"

namespace cohort::cli {
namespace {

struct KeygenArgs {
  std::string dir;
  std::string role;
  std::string authorize;
  std::vector<std::string> nodes;
  std::string name, max_gpus, max_queued;
  JsonFlag json;
};

// The document --json prints once the keys are written.
void print_keygen_json(const KeygenArgs& args) {
  const std::string role = args.role.empty() ? "coordinator" : args.role;
  const std::string file =
      (std::filesystem::path(args.dir) / ((args.role.empty() ? "server" : args.role) + ".public")).string();
  std::ifstream in(file);
  std::string key;
  std::getline(in, key);
  print_json({{"dir", args.dir},
              {"role", role},
              {"public_key_file", file},
              {"public_key", key},
              {"authorized_in", args.authorize.empty() ? nlohmann::json() : nlohmann::json(args.authorize)}});
}

int run_keygen(const KeygenArgs& args) {
  const char* d = args.dir.c_str();
  if (args.role.empty()) {
    if (!args.authorize.empty()) {
      std::fprintf(stderr, "cohort keygen: --authorize goes with --role agent|client\n");
      return kExitUsage;
    }
    if (auto s = protocol::write_coordinator_keys(args.dir); !s) {
      std::fprintf(stderr, "cohort keygen: %s\n", s.message().c_str());
      return kExitUsage;
    }
    if (args.json.on()) {
      print_keygen_json(args);
      return kExitOk;
    }
    std::printf("wrote the coordinator's CURVE keys to %s (keep this folder on the coordinator's host)\n"
                "  coordinator: cohort coordinator --listen tcp://0.0.0.0:7070 --keys %s\n"
                "  an agent:    cohort keygen NODE_KEYS --role agent --authorize %s, copy NODE_KEYS to the node\n"
                "  a client:    cohort keygen MY_KEYS --role client --authorize %s\n",
                d, d, d, d);
    return kExitOk;
  }
  auto role = protocol::parse_role(args.role);
  if (!role) {
    std::fprintf(stderr, "cohort keygen: --role: %s\n", role.status().message().c_str());
    return kExitUsage;
  }
  protocol::ClientKeySettings client;
  client.name = args.name;
  for (auto [flag, text, limit] : {std::tuple{"--max-gpus", &args.max_gpus, &client.max_gpus},
                                   std::tuple{"--max-queued", &args.max_queued, &client.max_queued}}) {
    if (text->empty()) continue;
    auto parsed = protocol::parse_client_limit(flag, *text);
    if (!parsed) {
      std::fprintf(stderr, "cohort keygen: %s\n", parsed.status().message().c_str());
      return kExitUsage;
    }
    *limit = *parsed;
  }
  if (auto s = protocol::write_peer_keys(args.dir, *role, args.authorize, args.nodes, client); !s) {
    std::fprintf(stderr, "cohort keygen: %s\n", s.message().c_str());
    return kExitUsage;
  }
  if (args.json.on()) {
    print_keygen_json(args);
    return kExitOk;
  }
  std::printf("wrote a %s key to %s\n", args.role.c_str(), d);
  if (args.authorize.empty()) {
    std::printf("  authorize it: append %s/%s.public to the coordinator's authorized_%ss and copy its "
                "server.public into %s\n",
                d, args.role.c_str(), args.role.c_str(), d);
  } else {
    std::printf("  authorized in %s/authorized_%ss (restart the coordinator to load it); use --keys %s\n",
                args.authorize.c_str(), args.role.c_str(), d);
  }
  return kExitOk;
}

}  // namespace

Command add_keygen_command(CLI::App& root) {
  auto args = std::make_shared<KeygenArgs>();
  CLI::App* app = root.add_subcommand("keygen", "create CURVE keys for the coordinator, an agent or a client");
  app->add_option("dir", args->dir, "directory to create")->required();
  app->add_option("--role", args->role, "agent or client: a key for one peer (default: the coordinator's keys)");
  app->add_option("--authorize", args->authorize,
                  "the coordinator's key folder: copy its server.public and authorize the new key there");
  app->add_option("--nodes", args->nodes,
                  "with --role agent --authorize: the only node names this key may register (comma-separated)")
      ->delimiter(',');
  app->add_option("--name", args->name,
                  "with --role client --authorize: the owner's name, shown beside the key's jobs");
  app->add_option("--max-gpus", args->max_gpus,
                  "with --role client --authorize: GPUs the key's running jobs may hold at once (N or unlimited; "
                  "default: the coordinator's --max-gpus-per-key)");
  app->add_option("--max-queued", args->max_queued,
                  "with --role client --authorize: the key's jobs that may wait in the queue (N or unlimited; "
                  "default: the coordinator's --max-queued-per-key)");
  args->json.add_to(app);
  return {app, [args] { return run_keygen(*args); }};
}

}  // namespace cohort::cli
