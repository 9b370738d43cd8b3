// `cohort run JOB.toml [--set key=value]... [--json]`, or torchrun's form
// `cohort run --nproc-per-node N -- PROGRAM ARGS...`: the embedded cluster
// (a coordinator and one agent in this process); exits with the job's status,
// 130 when Ctrl-C stopped it. With --json the workers' lines go to stderr and
// the job's final record (as `cohort status JOB --json`) to stdout.
#include <cstdio>

#include <spdlog/spdlog.h>

#include "base/env_knobs.h"
#include "cluster/embedded_cluster.h"
#include "cli/client_common.h"
#include "cli/commands.h"
#include "cli/progress_line.h"
#include "jobs/command_line_job.h"
#include "jobs/load.h"
#include "protocol/codec.h"
#include "protocol/job_watch.h"

namespace cohort::cli {
namespace {

struct RunArgs {
  JsonFlag json;
  std::vector<std::string> positionals;  // JOB.toml, or with --nproc-per-node: PROGRAM ARGS...
  int nproc_per_node = 0;
  int nnodes = 1;
  std::vector<std::string> sets;
  int fake_gpus = 0;
  int cpu_slots = 0;
  std::string worker_binary;
  std::string http;
  std::string http_token;
  std::string containment = "auto";
};

std::vector<std::string>& program_argv() {
  static std::vector<std::string> argv;
  return argv;
}

// torchrun's form: `cohort run --nproc-per-node N -- PROGRAM ARGS...` runs
// the command job jobs/command_line_job.h builds, as a file would.
bool load_command_line_job(const RunArgs& args, jobs::JobSpec* spec) {
  jobs::LoadOptions options;
  for (const auto& s : args.sets) {
    auto o = jobs::parse_override(s);
    if (!o) {
      std::fprintf(stderr, "cohort run: %s\n", o.status().message().c_str());
      return false;
    }
    options.overrides.push_back(*o);
  }
  std::vector<std::string> argv = args.positionals;
  argv.insert(argv.end(), program_argv().begin(), program_argv().end());
  std::string text = jobs::command_line_job_toml(argv, args.nproc_per_node, args.nnodes);
  auto loaded = jobs::load_job_text(text, "cohort run --nproc-per-node", options);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s", loaded.error_text().c_str());
    return false;
  }
  *spec = std::move(loaded.spec);
  return true;
}

int run_spec(jobs::JobSpec spec, const RunArgs& args);

int run_run(const RunArgs& args) {
  int code = kExitOk;
  jobs::JobSpec spec;
  if (args.nproc_per_node > 0) {
    if (args.positionals.empty() && program_argv().empty()) {
      std::fprintf(stderr, "cohort run: --nproc-per-node needs the program: cohort run --nproc-per-node %d -- "
                           "python3 train.py\n", args.nproc_per_node);
      return kExitUsage;
    }
    if (!load_command_line_job(args, &spec)) return kExitUsage;
  } else {
    if (args.positionals.size() != 1 || !program_argv().empty()) {
      std::fprintf(stderr, "cohort run: give one job file (cohort run JOB.toml), or a program with "
                           "--nproc-per-node (cohort run --nproc-per-node 2 -- python3 train.py)\n");
      return kExitUsage;
    }
    if (!load_job_spec(args.positionals[0], args.sets, &spec, &code, /*local=*/true)) return code;
  }
  return run_spec(std::move(spec), args);
}

// `cohort serve MODEL [flags]`: the serve job jobs::serve_job_toml writes for
// the command line, run as `cohort run` runs a file.
struct ServeArgs {
  RunArgs run;
  jobs::ServeCommandLine line;
};

int run_serve(const ServeArgs& args) {
  int code = kExitOk;
  jobs::JobSpec spec;
  if (!load_job_spec_text(jobs::serve_job_toml(args.line), "cohort serve " + args.line.model, args.run.sets, &spec,
                          &code, /*local=*/true)) {
    return code;
  }
  return run_spec(std::move(spec), args.run);
}

// Runs a loaded job in the embedded cluster.
int run_spec(jobs::JobSpec spec, const RunArgs& args) {
  cluster::EmbeddedRunOptions options;
  options.spec = std::move(spec);
  jobs::NodeRange& nodes = options.spec.job.nodes;
  if (nodes.min > 1) {
    std::fprintf(stderr, "cohort run: the job needs %d nodes; `cohort run` is one node. Use "
                         "`cohort submit` on a cluster, or --set job.nodes=1\n",
                 nodes.min);
    return kExitUsage;
  }
  nodes.max = 1;  // an elastic job runs at its minimum, one node
  options.fake_gpus = args.fake_gpus;
  options.cpu_slots = args.cpu_slots;
  options.worker_binary = args.worker_binary;
  options.http_listen = args.http;
  options.http_token = args.http_token;
  auto containment = agent::parse_containment(args.containment);
  if (!containment) {
    std::fprintf(stderr, "cohort run: --containment: %s\n", containment.status().message().c_str());
    return kExitUsage;
  }
  options.containment = *containment;
  if (options.http_token.empty()) {
    if (const char* env = read_env_knob(EnvKnob::kHttpToken)) options.http_token = env;
  }
  const auto* interrupted = install_interrupt_flag();
  options.interrupt = interrupted;
  // The embedded daemons' routine lines would drown the workers' output;
  // COHORT_LOG or --log-level debug/trace still shows them.
  if (!read_env_knob(EnvKnob::kLog) && spdlog::get_level() == spdlog::level::info) {
    spdlog::set_level(spdlog::level::warn);
  }
  ProgressLine progress(options.spec.job.output_dir);
  FILE* lines_out = args.json.on() ? stderr : stdout;
  if (progress.enabled() || args.json.on()) {
    options.on_line = [&progress, lines_out](const protocol::LogLine& line) {
      progress.clear();
      std::fprintf(lines_out, "%s\n", protocol::format_log_line(line).c_str());
      std::fflush(lines_out);
    };
  }
  if (progress.enabled()) options.on_poll = [&progress] { progress.refresh(); };
  auto info = cluster::run_embedded(options);
  progress.clear();
  if (!info) {
    std::fprintf(stderr, "cohort run: %s\n", info.status().message().c_str());
    // A job this machine cannot hold is a usage problem, not a job failure.
    return info.status().code() == StatusCode::kFailedPrecondition ? kExitUsage : kExitJobFailed;
  }
  std::fflush(stdout);
  std::fprintf(stderr, "cohort: job %s %s%s%s (logs in %s/logs)\n", info->name.c_str(),
               info->state.c_str(), info->message.empty() ? "" : ": ", info->message.c_str(),
               info->output_dir.c_str());
  if (info->has_root_cause) print_root_cause(info->root_cause, "", stderr);
  if (args.json.on()) print_json(*info);
  return interrupted->load() ? kExitInterrupted : job_exit_code(*info);
}

}  // namespace

void set_run_program_argv(std::vector<std::string> argv) { program_argv() = std::move(argv); }

// The flags `cohort run` and `cohort serve` share: where the workers run and
// the web page.
void add_embedded_flags(CLI::App* app, RunArgs* args) {
  app->add_option("--set", args->sets, "override a key: --set train.lr=1e-3");
  args->json.add_to(app);
  auto fake = app->add_option("--fake-gpus", args->fake_gpus, "pretend to have N GPUs (tests)");
  auto cpu = app->add_option("--cpu-slots", args->cpu_slots, "run on N CPU slots instead of GPUs");
  fake->excludes(cpu);
  app->add_option("--worker-binary", args->worker_binary, "cohort-worker (default: next to this program)");
  app->add_option("--containment", args->containment,
                  "auto (cgroup v2 where the host delegates it, else subreaper), cgroup, or subreaper");
  app->add_option("--http", args->http, "serve the web page and HTTP API on HOST:PORT while the job runs");
  app->add_option("--http-token", args->http_token,
                  "token that allows cancelling from the web page (default: $COHORT_HTTP_TOKEN)");
}

Command add_run_command(CLI::App& root) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* app = root.add_subcommand("run", "run a job on this machine (coordinator + agent in one process)");
  app->add_option("job", args->positionals,
                  "job file (TOML); with --nproc-per-node: -- PROGRAM ARGS... (a command job, torchrun's environment)");
  app->add_option("--nproc-per-node", args->nproc_per_node,
                  "torchrun's flag: run `-- PROGRAM ARGS...` as a command job of N workers (no job file)")
      ->check(CLI::Range(1, 1024));
  app->add_option("--nnodes", args->nnodes, "torchrun's flag; `cohort run` is one node (cohort submit for more)")
      ->check(CLI::Range(1, 1));
  add_embedded_flags(app, args.get());
  return {app, [args] { return run_run(*args); }};
}

Command add_serve_command(CLI::App& root) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* app = root.add_subcommand(
      "serve", "serve a model over the OpenAI API on this machine, as `vllm serve` does (no job file)");
  app->add_option("model", args->line.model,
                  "a Hugging Face folder, a model id in the local Hugging Face cache (ORG/NAME), or a cohort "
                  "checkpoint (its folder, a `latest` file, or a run's output_dir)")
      ->required();
  app->add_option("--host", args->line.host, "address to serve on (default 127.0.0.1; off loopback give --api-key)");
  app->add_option("--port", args->line.port, "TCP port (default 8000; 0: any free port)")->check(CLI::Range(0, 65535));
  app->add_option("--tensor-parallel-size,--tp", args->line.tensor_parallel,
                  "GPUs the model is split over (default 1)")
      ->check(CLI::Range(1, 1024));
  app->add_option("--api-key", args->line.api_key, "key every /v1 request must carry as a bearer token");
  app->add_option("--served-model-name", args->line.served_model_name, "the model's name in the API");
  app->add_option("--max-num-seqs,--max-running", args->line.max_running, "sequences decoded together")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--max-model-len,--context", args->line.context, "positions per sequence")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--adapter", args->line.adapter,
                  "a PEFT LoRA adapter folder, merged into the model's weights when it loads");
  app->add_option("--lora-modules", args->line.lora_modules,
                  "NAME=DIR (repeatable): PEFT adapters served beside the base, picked by a request's model");
  add_embedded_flags(app, &args->run);
  return {app, [args] { return run_serve(*args); }};
}

}  // namespace cohort::cli
