// `cohort jobs [--json] [--limit N] [--state S]`: the newest jobs the
// coordinator keeps in memory; `cohort jobs rm JOB...` forgets finished ones.
#include <cstdio>

#include "cli/client_common.h"
#include "cli/commands.h"
#include "protocol/codec.h"

namespace cohort::cli {
namespace {

struct JobsArgs {
  ClientFlags client;
  bool json = false;
  int limit = 0;
  std::string state;
  std::vector<std::string> remove;
};

int run_jobs_rm(const JobsArgs& args) {
  int code = kExitOk;
  auto client = connect_client(args.client, &code);
  if (!client) return code;
  for (const auto& id : args.remove) {
    auto ack = client->request<protocol::Ack>(protocol::RemoveJob{id}, std::chrono::seconds(5));
    if (!ack) {
      code = report_request_error("jobs rm", ack.status());
      continue;
    }
    std::printf("%s\n", ack->text.c_str());
  }
  return code;
}

int run_jobs(const JobsArgs& args) {
  int code = kExitOk;
  auto client = connect_client(args.client, &code);
  if (!client) return code;
  protocol::JobQuery query;
  query.limit = args.limit;
  query.state = args.state;
  auto list = client->request<protocol::JobList>(query, std::chrono::seconds(5));
  if (!list) return report_request_error("jobs", list.status());
  if (args.json) {
    std::printf("%s\n", nlohmann::json(list->jobs).dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    print_job_table(list->jobs);
    if (list->more) {
      std::fprintf(stderr, "(%zu of %d jobs shown; use --limit or --state to choose)\n",
                   list->jobs.size(), list->total);
    }
  }
  return kExitOk;
}

}  // namespace

Command add_jobs_command(CLI::App& root) {
  auto args = std::make_shared<JobsArgs>();
  CLI::App* app = root.add_subcommand("jobs", "list jobs");
  app->add_flag("--json", args->json, "print JSON");
  app->add_option("--limit", args->limit, "show the newest N jobs")->check(CLI::NonNegativeNumber);
  app->add_option("--state", args->state, "only jobs in this state")
      ->check(CLI::IsMember({"queued", "running", "stopping", "succeeded", "failed", "cancelled"}));
  args->client.add_to(app);
  CLI::App* rm = app->add_subcommand("rm", "forget finished jobs (in memory and in the state database)");
  rm->add_option("job", args->remove, "job ids or names")->required();
  rm->fallthrough();
  return {app, [args, rm] { return rm->parsed() ? run_jobs_rm(*args) : run_jobs(*args); }};
}

}  // namespace cohort::cli
