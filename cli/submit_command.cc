// `cohort submit JOB.toml [--set key=value]... [--wait] [--json]`: prints the
// job id; with --wait, follows the job's logs and exits 0 or 1 with its
// result (130 when Ctrl-C stopped it). With --json: {"job_id": ID}, plus
// "job" (as `cohort status JOB --json` prints it) after --wait, whose log
// lines then go to stderr.
#include <cstdio>

#include "cli/client_common.h"
#include "cli/commands.h"
#include "jobs/load.h"
#include "protocol/codec.h"
#include "protocol/job_watch.h"

namespace cohort::cli {
namespace {

struct SubmitArgs {
  ClientFlags client;
  JsonFlag json;
  std::string job_file;
  std::vector<std::string> sets;
  bool wait = false;
};

int run_submit(const SubmitArgs& args) {
  int code = kExitOk;
  jobs::JobSpec spec;
  if (!load_job_spec(args.job_file, args.sets, &spec, &code)) return code;
  auto client = connect_client(args.client, &code);
  if (!client) return code;
  auto reply = client->request<protocol::SubmitReply>(protocol::SubmitJob{jobs::to_toml(spec)},
                                                      std::chrono::seconds(10));
  if (!reply) return report_request_error("submit", reply.status());
  nlohmann::json out = {{"job_id", reply->job_id}};
  if (!args.wait) {
    if (args.json.on()) {
      print_json(out);
    } else {
      std::printf("%s\n", reply->job_id.c_str());
    }
    return kExitOk;
  }
  if (!args.json.on()) std::printf("%s\n", reply->job_id.c_str());
  std::fflush(stdout);
  protocol::WatchOptions watch;
  const auto* interrupted = install_interrupt_flag();
  watch.interrupt = interrupted;
  if (args.json.on()) {
    watch.on_line = [](const protocol::LogLine& line) {
      std::fprintf(stderr, "%s\n", protocol::format_log_line(line).c_str());
    };
  }
  auto info = protocol::watch_job(*client, reply->job_id, watch);
  if (!info) return report_request_error("submit", info.status());
  std::fflush(stdout);
  std::fprintf(stderr, "cohort: job %s %s%s%s\n", info->id.c_str(), info->state.c_str(),
               info->message.empty() ? "" : ": ", info->message.c_str());
  if (info->has_root_cause) print_root_cause(info->root_cause, "", stderr);
  if (args.json.on()) {
    out["job"] = *info;
    print_json(out);
  }
  return interrupted->load() ? kExitInterrupted : job_exit_code(*info);
}

}  // namespace

Command add_submit_command(CLI::App& root) {
  auto args = std::make_shared<SubmitArgs>();
  CLI::App* app = root.add_subcommand("submit", "submit a job; prints its id");
  app->add_option("job", args->job_file, "job file (TOML)")->required();
  app->add_option("--set", args->sets, "override a key: --set train.lr=1e-3");
  app->add_flag("--wait", args->wait, "follow the job's logs; exit 0 if it succeeds, 1 if not, 130 on Ctrl-C");
  args->json.add_to(app);
  args->client.add_to(app);
  return {app, [args] { return run_submit(*args); }};
}

}  // namespace cohort::cli
