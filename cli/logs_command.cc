// `cohort logs JOB [--rank R] [--attempt A] [--follow] [--tail N]`: worker
// output as the coordinator keeps it (its last 16 MiB per job, also after
// a restart), each line prefixed with its rank. When lines asked for are
// only in the per-rank files on the nodes, stderr says where; lines an agent
// could not forward are marked where they were, with the file that has them.
// Control characters are escaped unless --raw.
#include <cstdio>

#include "cli/client_common.h"
#include "cli/commands.h"
#include "protocol/job_watch.h"

namespace cohort::cli {
namespace {

struct LogsArgs {
  ClientFlags client;
  std::string job;
  int rank = -1;
  int attempt = -1;
  int tail = 0;
  bool follow = false;
  bool raw = false;
};

int run_logs(const LogsArgs& args) {
  int code = kExitOk;
  auto client = connect_client(args.client, &code);
  if (!client) return code;
  protocol::WatchOptions watch;
  watch.rank = args.rank;
  watch.attempt = args.attempt;
  watch.follow = args.follow;
  watch.tail = args.tail;
  watch.raw = args.raw;
  watch.on_note = [](const std::string& note) { std::fprintf(stderr, "cohort logs: %s\n", note.c_str()); };
  auto info = protocol::watch_job(*client, args.job, watch);
  if (!info) return report_request_error("logs", info.status());
  return kExitOk;
}

}  // namespace

Command add_logs_command(CLI::App& root) {
  auto args = std::make_shared<LogsArgs>();
  CLI::App* app = root.add_subcommand("logs", "print a job's worker output");
  app->add_option("job", args->job, "job id or name")->required();
  app->add_option("--rank", args->rank, "only this rank");
  app->add_option("--attempt", args->attempt, "only this attempt");
  app->add_option("--tail,-n", args->tail, "only the last N lines (then, with --follow, new ones)")
      ->check(CLI::Range(1, 100000));
  app->add_flag("--follow,-f", args->follow, "keep printing until the job ends");
  app->add_flag("--raw", args->raw,
                "write the output's control characters as they are (default: as \\xHH, tab excepted)");
  args->client.add_to(app);
  return {app, [args] { return run_logs(*args); }};
}

}  // namespace cohort::cli
