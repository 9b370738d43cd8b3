// `cohort history [--json] [--limit N]`: finished jobs (Slurm's sacct), newest
// last: when each was submitted and ended, how long it ran, its GPU-hours,
// how it ended and, for a failure, its root cause. From the jobs the
// coordinator keeps in memory (CoordinatorOptions::finished_retention).
#include <cstdio>
#include <ctime>

#include <fmt/format.h>

#include "cli/client_common.h"
#include "cli/commands.h"
#include "cli/progress_line.h"
#include "protocol/codec.h"

namespace cohort::cli {
namespace {

struct HistoryArgs {
  ClientFlags client;
  JsonFlag json;
  int limit = 0;
};

bool finished(const protocol::JobInfo& j) {
  return j.state == "succeeded" || j.state == "failed" || j.state == "cancelled" || j.state == "timed_out";
}

std::string date_time(int64_t unix_ms) { return local_time(unix_ms, "%Y-%m-%d %H:%M:%S"); }

std::string root_cause_text(const protocol::JobInfo& j) {
  if (!j.has_root_cause) return j.message;
  return "rank " + std::to_string(j.root_cause.rank) + " on " + j.root_cause.node + ": " + j.root_cause.reason;
}

nlohmann::json history_entry(const protocol::JobInfo& j) {
  nlohmann::json e = {{"id", j.id},           {"name", j.name},          {"state", j.state},
                      {"submitted_ms", j.submitted_ms}, {"ended_ms", j.ended_ms},
                      {"elapsed_ms", j.elapsed_ms},     {"gpu_hours", j.gpu_hours},
                      {"attempts", j.attempts.size()},  {"restarts_used", j.restarts_used},
                      {"message", j.message}};
  e["started_ms"] = j.attempts.empty() ? 0 : j.attempts.front().started_ms;
  if (j.has_root_cause) e["root_cause"] = j.root_cause;
  return e;
}

int run_history(const HistoryArgs& args) {
  int code = kExitOk;
  auto client = connect_client(args.client, &code);
  if (!client) return code;
  auto list = client->request<protocol::JobList>(protocol::JobQuery{}, std::chrono::seconds(5));
  if (!list) return report_request_error("history", list.status());
  std::vector<const protocol::JobInfo*> done;
  for (const auto& j : list->jobs) {
    if (finished(j)) done.push_back(&j);
  }
  if (args.limit > 0 && int(done.size()) > args.limit) done.erase(done.begin(), done.end() - args.limit);
  if (args.json.on()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto* j : done) out.push_back(history_entry(*j));
    print_json(out);
    return kExitOk;
  }
  std::printf("%-10s %-20s %-10s %-19s %-19s %-8s %-9s %s\n", "JOB", "NAME", "STATE", "STARTED", "ENDED", "ELAPSED",
              "GPU-HOURS", "EXIT / ROOT CAUSE");
  for (const auto* j : done) {
    int64_t started = j->attempts.empty() ? 0 : j->attempts.front().started_ms;
    std::printf("%-10s %-20s %-10s %-19s %-19s %-8s %-9s %s\n", j->id.c_str(), j->name.c_str(), j->state.c_str(),
                date_time(started).c_str(), date_time(j->ended_ms).c_str(),
                j->elapsed_ms > 0 ? format_duration(double(j->elapsed_ms) / 1000).c_str() : "-",
                fmt::format("{:.3f}", j->gpu_hours).c_str(), root_cause_text(*j).c_str());
  }
  return kExitOk;
}

}  // namespace

Command add_history_command(CLI::App& root) {
  auto args = std::make_shared<HistoryArgs>();
  CLI::App* app = root.add_subcommand("history", "finished jobs: start, end, GPU-hours, exit, root cause (as sacct)");
  args->json.add_to(app);
  app->add_option("--limit", args->limit, "only the newest N finished jobs")->check(CLI::NonNegativeNumber);
  args->client.add_to(app);
  return {app, [args] { return run_history(*args); }};
}

}  // namespace cohort::cli
