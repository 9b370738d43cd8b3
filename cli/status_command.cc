// `cohort status [JOB] [--json]`: one job in detail (attempts, root cause,
// events), or every job as a table.
#include <cstdio>
#include <fstream>

#include "cli/client_common.h"
#include "cli/commands.h"
#include "protocol/codec.h"

namespace cohort::cli {
namespace {

struct StatusArgs {
  ClientFlags client;
  std::string job;
  JsonFlag json;
};

// A server job (kind = "serve") writes its URL to output_dir/endpoint.json;
// shown when this host can read it (the embedded cluster, a shared file system).
void print_serve_endpoint(const protocol::JobInfo& job) {
  if (job.kind != "serve" || job.state != "running") return;
  std::ifstream in(job.output_dir + "/endpoint.json");
  const auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("url") || !j["url"].is_string()) return;
  const std::string url = j["url"].get<std::string>();
  std::printf("endpoint:   %s   (live counters: curl %s/metrics)\n", url.c_str(),
              url.substr(0, url.size() - 3).c_str());
}

int run_status(const StatusArgs& args) {
  int code = kExitOk;
  auto client = connect_client(args.client, &code);
  if (!client) return code;
  auto list = client->request<protocol::JobList>(protocol::JobQuery{args.job, 0, {}}, std::chrono::seconds(5));
  if (!list) return report_request_error("status", list.status());
  if (args.json.on()) {
    nlohmann::json j = args.job.empty() ? nlohmann::json(list->jobs) : nlohmann::json(list->jobs.front());
    print_json(j);
  } else if (args.job.empty()) {
    print_job_table(list->jobs);
  } else {
    print_job_detail(list->jobs.front());
    print_serve_endpoint(list->jobs.front());
  }
  return kExitOk;
}

}  // namespace

Command add_status_command(CLI::App& root) {
  auto args = std::make_shared<StatusArgs>();
  CLI::App* app = root.add_subcommand("status", "show a job (attempts, root cause, events) or all jobs");
  app->add_option("job", args->job, "job id or name");
  args->json.add_to(app);
  args->client.add_to(app);
  return {app, [args] { return run_status(*args); }};
}

}  // namespace cohort::cli
