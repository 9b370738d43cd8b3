// `cohort submit JOB.toml [--set key=value]... [--wait]`: prints the job id;
// with --wait, follows the job's logs and exits 0 or 1 with its result.
#include <cstdio>

#include "cli/client_common.h"
#include "cli/commands.h"
#include "protocol/job_watch.h"

namespace cohort::cli {
namespace {

struct SubmitArgs {
  ClientFlags client;
  std::string job_file;
  std::vector<std::string> sets;
  bool wait = false;
};

int run_submit(const SubmitArgs& args) {
  int code = kExitOk;
  protocol::JobControl job;
  if (!load_job_control(args.job_file, args.sets, &job, &code)) return code;
  auto client = connect_client(args.client, &code);
  if (!client) return code;
  auto reply = client->request<protocol::SubmitReply>(protocol::SubmitJob{job}, std::chrono::seconds(10));
  if (!reply) return report_request_error("submit", reply.status());
  std::printf("%s\n", reply->job_id.c_str());
  std::fflush(stdout);
  if (!args.wait) return kExitOk;
  protocol::WatchOptions watch;
  watch.interrupt = install_interrupt_flag();
  auto info = protocol::watch_job(*client, reply->job_id, watch);
  if (!info) return report_request_error("submit", info.status());
  std::fprintf(stderr, "cohort: job %s %s%s%s\n", info->id.c_str(), info->state.c_str(),
               info->message.empty() ? "" : ": ", info->message.c_str());
  if (info->has_root_cause) {
    std::fflush(stdout);
    print_root_cause(info->root_cause, "", stderr);
  }
  return job_exit_code(*info);
}

}  // namespace

Command add_submit_command(CLI::App& root) {
  auto args = std::make_shared<SubmitArgs>();
  CLI::App* app = root.add_subcommand("submit", "submit a job; prints its id");
  app->add_option("job", args->job_file, "job file (TOML)")->required();
  app->add_option("--set", args->sets, "override a key: --set train.lr=1e-3");
  app->add_flag("--wait", args->wait, "follow the job's logs; exit 0 if it succeeds, 1 if not");
  args->client.add_to(app);
  return {app, [args] { return run_submit(*args); }};
}

}  // namespace cohort::cli
