// `cohort cancel JOB`: workers get SIGTERM, then SIGKILL after stop_grace.
#include <cstdio>

#include "cli/client_common.h"
#include "cli/commands.h"

namespace cohort::cli {
namespace {

struct CancelArgs {
  ClientFlags client;
  std::string job;
};

int run_cancel(const CancelArgs& args) {
  int code = kExitOk;
  auto client = connect_client(args.client, &code);
  if (!client) return code;
  auto ack = client->request<protocol::Ack>(protocol::CancelJob{args.job}, std::chrono::seconds(5));
  if (!ack) return report_request_error("cancel", ack.status());
  std::printf("%s\n", ack->text.c_str());
  return kExitOk;
}

}  // namespace

Command add_cancel_command(CLI::App& root) {
  auto args = std::make_shared<CancelArgs>();
  CLI::App* app = root.add_subcommand("cancel", "cancel a job");
  app->add_option("job", args->job, "job id or name")->required();
  args->client.add_to(app);
  return {app, [args] { return run_cancel(*args); }};
}

}  // namespace cohort::cli
