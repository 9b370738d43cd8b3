// `cohort cancel JOB... [--json]`: workers get SIGTERM, then SIGKILL after
// stop_grace. One result per job; the exit code is 0 when every job was
// found, 2 when one was not, 3 when the coordinator stopped answering (the
// remaining jobs are not tried).
#include <cstdio>

#include "cli/client_common.h"
#include "cli/commands.h"

namespace cohort::cli {
namespace {

struct CancelArgs {
  ClientFlags client;
  JsonFlag json;
  std::vector<std::string> jobs;
};

int run_cancel(const CancelArgs& args) {
  int code = kExitOk;
  auto client = connect_client(args.client, &code);
  if (!client) return code;
  return request_each("cancel", "job", args.jobs, args.json.on(), [&](const std::string& id) {
    return client->request<protocol::Ack>(protocol::CancelJob{id}, std::chrono::seconds(5));
  });
}

}  // namespace

Command add_cancel_command(CLI::App& root) {
  auto args = std::make_shared<CancelArgs>();
  CLI::App* app = root.add_subcommand("cancel", "cancel jobs");
  app->add_option("job", args->jobs, "job ids or names")->required();
  args->json.add_to(app);
  args->client.add_to(app);
  return {app, [args] { return run_cancel(*args); }};
}

}  // namespace cohort::cli
