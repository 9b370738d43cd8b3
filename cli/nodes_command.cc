// `cohort nodes [--json | --quiet]`: the cluster's nodes, their GPUs and jobs;
// `cohort nodes rm NODE...` forgets lost ones.
#include <cstdio>

#include "cli/client_common.h"
#include "cli/commands.h"
#include "protocol/codec.h"

namespace cohort::cli {
namespace {

struct NodesArgs {
  ClientFlags client;
  JsonFlag json;
  bool quiet = false;
  std::vector<std::string> remove;
};

int run_nodes_rm(const NodesArgs& args) {
  int code = kExitOk;
  auto client = connect_client(args.client, &code);
  if (!client) return code;
  return request_each("nodes rm", "node", args.remove, args.json.on(), [&](const std::string& node) {
    return client->request<protocol::Ack>(protocol::RemoveNode{node}, std::chrono::seconds(5));
  });
}

int run_nodes(const NodesArgs& args) {
  int code = kExitOk;
  auto client = connect_client(args.client, &code);
  if (!client) return code;
  auto list = client->request<protocol::NodeList>(protocol::NodeQuery{}, std::chrono::seconds(5));
  if (!list) return report_request_error("nodes", list.status());
  if (args.json.on()) {
    print_json(nlohmann::json(list->nodes));
    return kExitOk;
  }
  if (args.quiet) {
    for (const auto& n : list->nodes) std::printf("%s\n", n.name.c_str());
    return kExitOk;
  }
  std::printf("%-20s %-16s %-8s %-9s %-14s %-12s %s\n", "NODE", "ADDRESS", "STATE", "GPUS FREE",
              "GPU", "HEARTBEAT", "JOBS");
  for (const auto& n : list->nodes) {
    std::string jobs;
    for (const auto& j : n.jobs) jobs += (jobs.empty() ? "" : ",") + j;
    std::string gpu = n.gpus.empty() ? "-" : n.gpus.front().name;
    std::printf("%-20s %-16s %-8s %3d of %-3zu %-14s %-12s %s\n", n.name.c_str(), n.address.c_str(),
                n.state.c_str(), n.gpus_free, n.gpus.size(), gpu.c_str(),
                (std::to_string(n.heartbeat_age_ms) + " ms ago").c_str(), jobs.c_str());
    if (!n.drain_reason.empty()) std::printf("  %s drained: %s\n", n.name.c_str(), n.drain_reason.c_str());
  }
  return kExitOk;
}

}  // namespace

Command add_nodes_command(CLI::App& root) {
  auto args = std::make_shared<NodesArgs>();
  CLI::App* app = root.add_subcommand("nodes", "list nodes");
  args->json.add_to(app);
  app->add_flag("--quiet,-q", args->quiet, "print only the node names, one per line");
  args->client.add_to(app);
  CLI::App* rm = app->add_subcommand("rm", "forget lost nodes (in memory and in the state database)");
  rm->add_option("node", args->remove, "node names")->required();
  return {app, [args, rm] { return rm->parsed() ? run_nodes_rm(*args) : run_nodes(*args); }};
}

}  // namespace cohort::cli
