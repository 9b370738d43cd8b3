// `cohort submit JOB.toml [--set key=value]... [--sweep key=values]... [--wait
// [--cancel-on-interrupt]] [--json]`: prints the job id; with --wait, follows
// the job's logs and exits 0 or 1 with its result (130 on Ctrl-C, which
// detaches: the job runs on, unless --cancel-on-interrupt). With --json: {"job_id": ID}, plus
// "job" (as `cohort status JOB --json` prints it) after --wait, whose log
// lines then go to stderr.
#include <cstdio>

#include "cli/client_common.h"
#include "cli/commands.h"
#include "jobs/load.h"
#include "jobs/sweep.h"
#include "protocol/codec.h"
#include "protocol/job_watch.h"

namespace cohort::cli {
namespace {

struct SubmitArgs {
  ClientFlags client;
  JsonFlag json;
  std::string job_file;
  std::vector<std::string> sets;
  std::vector<std::string> sweeps;
  bool wait = false;
  bool cancel_on_interrupt = false;
};

// --sweep: one job per point of the grid (jobs/sweep.h), each printed as
// "ID  NAME  KEY=VALUE...  OUTPUT_DIR".
int run_sweep(const SubmitArgs& args) {
  if (args.wait) {
    std::fprintf(stderr, "cohort submit: --wait follows one job; a sweep submits many (follow them with "
                         "`cohort jobs`, or `cohort logs JOB --follow`)\n");
    return kExitUsage;
  }
  std::vector<jobs::SweepAxis> axes;
  for (const auto& text : args.sweeps) {
    auto axis = jobs::parse_sweep(text);
    if (!axis) {
      std::fprintf(stderr, "cohort submit: %s\n", axis.status().message().c_str());
      return kExitUsage;
    }
    axes.push_back(std::move(*axis));
  }
  auto points = jobs::sweep_points(axes);
  if (!points) {
    std::fprintf(stderr, "cohort submit: %s\n", points.status().message().c_str());
    return kExitUsage;
  }
  // Every point loads before any is submitted: a bad value submits nothing.
  int code = kExitOk;
  std::vector<jobs::JobSpec> specs;
  for (size_t i = 0; i < points->size(); ++i) {
    std::vector<std::string> sets = args.sets;
    for (const auto& o : (*points)[i]) sets.push_back(o.text());
    jobs::JobSpec spec;
    if (!load_job_spec(args.job_file, sets, &spec, &code)) return code;
    jobs::apply_sweep_point(int(i), &spec);
    specs.push_back(std::move(spec));
  }
  auto client = connect_client(args.client, &code);
  if (!client) return code;
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < specs.size(); ++i) {
    auto reply = client->request<protocol::SubmitReply>(protocol::SubmitJob{jobs::to_toml(specs[i])},
                                                        std::chrono::seconds(10));
    if (!reply) {
      if (i > 0) std::fprintf(stderr, "cohort submit: %zu of %zu sweep points were submitted\n", i, specs.size());
      return report_request_error("submit", reply.status());
    }
    std::string overrides;
    for (const auto& o : (*points)[i]) overrides += (overrides.empty() ? "" : " ") + o.text();
    out.push_back({{"job_id", reply->job_id}, {"name", specs[i].job.name}, {"overrides", overrides},
                   {"output_dir", specs[i].job.output_dir}});
    if (!args.json.on()) {
      std::printf("%s\t%s\t%s\t%s\n", reply->job_id.c_str(), specs[i].job.name.c_str(), overrides.c_str(),
                  specs[i].job.output_dir.c_str());
    }
  }
  if (args.json.on()) print_json(out);
  return kExitOk;
}

int run_submit(const SubmitArgs& args) {
  if (!args.sweeps.empty()) return run_sweep(args);
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
  watch.detach_on_interrupt = !args.cancel_on_interrupt;
  if (args.json.on()) {
    watch.on_line = [](const protocol::LogLine& line) {
      std::fprintf(stderr, "%s\n", protocol::format_log_line(line).c_str());
    };
  }
  auto info = protocol::watch_job(*client, reply->job_id, watch);
  if (!info) return report_request_error("submit", info.status());
  std::fflush(stdout);
  if (interrupted->load() && !args.cancel_on_interrupt) {
    std::fprintf(stderr,
                 "cohort: detached from job %s (%s); it keeps running. Follow it with `cohort logs %s --follow`, "
                 "stop it with `cohort cancel %s`\n",
                 info->id.c_str(), info->state.c_str(), info->id.c_str(), info->id.c_str());
    if (args.json.on()) print_json(nlohmann::json{{"job_id", info->id}, {"detached", true}});
    return kExitInterrupted;
  }
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
  app->add_flag("--wait", args->wait,
                "follow the job's logs; exit 0 if it succeeds, 1 if not; Ctrl-C detaches (exit 130), the job runs on");
  app->add_flag("--cancel-on-interrupt", args->cancel_on_interrupt,
                "with --wait: Ctrl-C cancels the job (SIGTERM, then SIGKILL after stop_grace) instead of detaching");
  app->add_option("--sweep", args->sweeps,
                  "submit one job per point: --sweep train.lr=1e-4,3e-4 --sweep train.seed=1..4 (each its own "
                  "name and output_dir)");
  args->json.add_to(app);
  args->client.add_to(app);
  return {app, [args] { return run_submit(*args); }};
}

}  // namespace cohort::cli
