// `cohort jobs [--json | --quiet] [--limit N] [--state S]`: the newest jobs
// the coordinator keeps in memory (paged by the coordinator, JobQuery);
// `cohort jobs rm JOB...` forgets finished ones.
#include <cstdio>

#include "cli/client_common.h"
#include "cli/commands.h"
#include "protocol/codec.h"

namespace cohort::cli {
namespace {

struct JobsArgs {
  ClientFlags client;
  JsonFlag json;
  bool quiet = false;
  int limit = 0;
  std::string state;
  std::vector<std::string> remove;
};

int run_jobs_rm(const JobsArgs& args) {
  int code = kExitOk;
  auto client = connect_client(args.client, &code);
  if (!client) return code;
  return request_each("jobs rm", "job", args.remove, args.json.on(), [&](const std::string& id) {
    return client->request<protocol::Ack>(protocol::RemoveJob{id}, std::chrono::seconds(5));
  });
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
  if (args.json.on()) {
    print_json(nlohmann::json(list->jobs));
  } else if (args.quiet) {
    for (const auto& j : list->jobs) std::printf("%s\n", j.id.c_str());
  } else {
    print_job_table(list->jobs);
  }
  if (list->more && !args.json.on()) {
    std::fprintf(stderr, "(%zu of %d jobs shown; use --limit or --state to choose)\n", list->jobs.size(),
                 list->total);
  }
  return kExitOk;
}

}  // namespace

Command add_jobs_command(CLI::App& root) {
  auto args = std::make_shared<JobsArgs>();
  CLI::App* app = root.add_subcommand("jobs", "list jobs");
  args->json.add_to(app);
  app->add_flag("--quiet,-q", args->quiet, "print only the job ids, one per line");
  app->add_option("--limit", args->limit, "show the newest N jobs")->check(CLI::NonNegativeNumber);
  app->add_option("--state", args->state, "only jobs in this state")
      ->check(CLI::IsMember({"queued", "running", "stopping", "succeeded", "failed", "cancelled", "timed_out"}));
  args->client.add_to(app);
  CLI::App* rm = app->add_subcommand("rm", "forget finished jobs (in memory and in the state database)");
  rm->add_option("job", args->remove, "job ids or names")->required();
  return {app, [args, rm] { return rm->parsed() ? run_jobs_rm(*args) : run_jobs(*args); }};
}

}  // namespace cohort::cli
