// `cohort jobs [--json]`: every job the coordinator knows.
#include <cstdio>

#include "cli/client_common.h"
#include "cli/commands.h"
#include "protocol/codec.h"

namespace cohort::cli {
namespace {

struct JobsArgs {
  ClientFlags client;
  bool json = false;
};

int run_jobs(const JobsArgs& args) {
  int code = kExitOk;
  auto client = connect_client(args.client, &code);
  if (!client) return code;
  auto list = client->request<protocol::JobList>(protocol::JobQuery{}, std::chrono::seconds(5));
  if (!list) return report_request_error("jobs", list.status());
  if (args.json) {
    std::printf("%s\n", nlohmann::json(list->jobs).dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    print_job_table(list->jobs);
  }
  return kExitOk;
}

}  // namespace

Command add_jobs_command(CLI::App& root) {
  auto args = std::make_shared<JobsArgs>();
  CLI::App* app = root.add_subcommand("jobs", "list jobs");
  app->add_flag("--json", args->json, "print JSON");
  args->client.add_to(app);
  return {app, [args] { return run_jobs(*args); }};
}

}  // namespace cohort::cli
