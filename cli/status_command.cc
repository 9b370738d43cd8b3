// `cohort status [JOB] [--json]`: one job in detail (attempts, root cause,
// events), or every job as a table.
#include <cstdio>

#include "cli/client_common.h"
#include "cli/commands.h"
#include "protocol/codec.h"

namespace cohort::cli {
namespace {

struct StatusArgs {
  ClientFlags client;
  std::string job;
  bool json = false;
};

int run_status(const StatusArgs& args) {
  int code = kExitOk;
  auto client = connect_client(args.client, &code);
  if (!client) return code;
  auto list = client->request<protocol::JobList>(protocol::JobQuery{args.job, 0, {}}, std::chrono::seconds(5));
  if (!list) return report_request_error("status", list.status());
  if (args.json) {
    nlohmann::json j = args.job.empty() ? nlohmann::json(list->jobs) : nlohmann::json(list->jobs.front());
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else if (args.job.empty()) {
    print_job_table(list->jobs);
  } else {
    print_job_detail(list->jobs.front());
  }
  return kExitOk;
}

}  // namespace

Command add_status_command(CLI::App& root) {
  auto args = std::make_shared<StatusArgs>();
  CLI::App* app = root.add_subcommand("status", "show a job (attempts, root cause, events) or all jobs");
  app->add_option("job", args->job, "job id or name");
  app->add_flag("--json", args->json, "print JSON");
  args->client.add_to(app);
  return {app, [args] { return run_status(*args); }};
}

}  // namespace cohort::cli
