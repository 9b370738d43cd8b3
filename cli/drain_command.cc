// `cohort drain NODE [--stop-running] [--wait]` and `cohort undrain NODE`
// (alias `uncordon`): take a node out of placement for maintenance and put
// it back. Without --stop-running the work already there finishes; with it,
// that work stops now and restarts elsewhere (an elastic job shrinks off the
// node) without using restart budget. --wait returns once nothing runs there.
#include <cstdio>
#include <thread>

#include "cli/client_common.h"
#include "cli/commands.h"

namespace cohort::cli {
namespace {

struct DrainArgs {
  ClientFlags client;
  std::string node;
  bool stop_running = false;
  bool wait = false;
};

// Polls `cohort nodes` until `node` runs nothing (or is gone); says what it
// waits for whenever that changes.
int wait_until_empty(protocol::Client& client, const std::string& node) {
  std::string waiting_for;
  while (true) {
    auto list = client.request<protocol::NodeList>(protocol::NodeQuery{}, std::chrono::seconds(5));
    if (!list) return report_request_error("drain", list.status());
    const protocol::NodeInfo* info = nullptr;
    for (const auto& n : list->nodes) {
      if (n.name == node) info = &n;
    }
    if (!info) {
      std::fprintf(stderr, "cohort drain: node %s is no longer known to the coordinator\n", node.c_str());
      return kExitOk;
    }
    if (info->jobs.empty() || info->state == "left" || info->state == "lost") {
      std::printf("node %s is %s: nothing runs there\n", node.c_str(), info->state.c_str());
      return kExitOk;
    }
    std::string jobs;
    for (const auto& j : info->jobs) jobs += (jobs.empty() ? "" : ", ") + j;
    if (jobs != waiting_for) {
      std::fprintf(stderr, "cohort drain: waiting for %s on %s\n", jobs.c_str(), node.c_str());
      waiting_for = jobs;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

int run_drain(const DrainArgs& args) {
  int code = kExitOk;
  auto client = connect_client(args.client, &code);
  if (!client) return code;
  auto ack = client->request<protocol::Ack>(protocol::DrainNode{args.node, args.stop_running},
                                            std::chrono::seconds(5));
  if (!ack) return report_request_error("drain", ack.status());
  std::printf("%s\n", ack->text.c_str());
  std::fflush(stdout);
  return args.wait ? wait_until_empty(*client, args.node) : kExitOk;
}

int run_undrain(const DrainArgs& args) {
  int code = kExitOk;
  auto client = connect_client(args.client, &code);
  if (!client) return code;
  auto ack = client->request<protocol::Ack>(protocol::UndrainNode{args.node}, std::chrono::seconds(5));
  if (!ack) return report_request_error("undrain", ack.status());
  std::printf("%s\n", ack->text.c_str());
  return kExitOk;
}

}  // namespace

Command add_drain_command(CLI::App& root) {
  auto args = std::make_shared<DrainArgs>();
  CLI::App* app = root.add_subcommand("drain", "take a node out of placement (maintenance); see `cohort undrain`");
  app->add_option("node", args->node, "node name (as `cohort nodes` lists it)")->required();
  app->add_flag("--stop-running", args->stop_running,
                "stop the work running there now (it restarts elsewhere without using restart budget); "
                "default: let it finish");
  app->add_flag("--wait", args->wait, "return once nothing runs on the node");
  args->client.add_to(app);
  return {app, [args] { return run_drain(*args); }};
}

Command add_undrain_command(CLI::App& root) {
  auto args = std::make_shared<DrainArgs>();
  CLI::App* app = root.add_subcommand("undrain", "let a drained node take new work again");
  app->alias("uncordon");
  app->add_option("node", args->node, "node name")->required();
  args->client.add_to(app);
  return {app, [args] { return run_undrain(*args); }};
}

}  // namespace cohort::cli
