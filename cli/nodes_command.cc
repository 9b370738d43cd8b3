// `cohort nodes [--json]`: the cluster's nodes, their GPUs and jobs.
#include <cstdio>

#include "cli/client_common.h"
#include "cli/commands.h"
#include "protocol/codec.h"

namespace cohort::cli {
namespace {

struct NodesArgs {
  ClientFlags client;
  bool json = false;
};

int run_nodes(const NodesArgs& args) {
  int code = kExitOk;
  auto client = connect_client(args.client, &code);
  if (!client) return code;
  auto list = client->request<protocol::NodeList>(protocol::NodeQuery{}, std::chrono::seconds(5));
  if (!list) return report_request_error("nodes", list.status());
  if (args.json) {
    std::printf("%s\n", nlohmann::json(list->nodes).dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return kExitOk;
  }
  std::printf("%-20s %-16s %-6s %-9s %-14s %-12s %s\n", "NODE", "ADDRESS", "STATE", "GPUS FREE",
              "GPU", "HEARTBEAT", "JOBS");
  for (const auto& n : list->nodes) {
    std::string jobs;
    for (const auto& j : n.jobs) jobs += (jobs.empty() ? "" : ",") + j;
    std::string gpu = n.gpus.empty() ? "-" : n.gpus.front().name;
    std::printf("%-20s %-16s %-6s %3d of %-3zu %-14s %-12s %s\n", n.name.c_str(), n.address.c_str(),
                n.state.c_str(), n.gpus_free, n.gpus.size(), gpu.c_str(),
                (std::to_string(n.heartbeat_age_ms) + " ms ago").c_str(), jobs.c_str());
  }
  return kExitOk;
}

}  // namespace

Command add_nodes_command(CLI::App& root) {
  auto args = std::make_shared<NodesArgs>();
  CLI::App* app = root.add_subcommand("nodes", "list nodes");
  app->add_flag("--json", args->json, "print JSON");
  args->client.add_to(app);
  return {app, [args] { return run_nodes(*args); }};
}

}  // namespace cohort::cli
