// `cohort keygen DIR`: CURVE keys for a coordinator and its agents/clients.
#include <cstdio>

#include "cli/commands.h"
#include "protocol/security.h"

namespace cohort::cli {
namespace {

int run_keygen(const std::string& dir) {
  if (auto s = protocol::write_key_directory(dir); !s) {
    std::fprintf(stderr, "cohort keygen: %s\n", s.message().c_str());
    return kExitUsage;
  }
  std::printf("wrote CURVE keys to %s\n"
              "  coordinator: cohort coordinator --listen tcp://0.0.0.0:7070 --keys %s\n"
              "  agents and clients: --keys %s (or COHORT_KEYS=%s); copy the directory to each node\n"
              "  more clients: append their public key to %s/authorized_keys\n",
              dir.c_str(), dir.c_str(), dir.c_str(), dir.c_str(), dir.c_str());
  return kExitOk;
}

}  // namespace

Command add_keygen_command(CLI::App& root) {
  auto dir = std::make_shared<std::string>();
  CLI::App* app = root.add_subcommand("keygen", "create CURVE keys for the coordinator and its peers");
  app->add_option("dir", *dir, "directory to create")->required();
  return {app, [dir] { return run_keygen(*dir); }};
}

}  // namespace cohort::cli
