// `cohort validate JOB.toml [--nodes N] [--gpus-per-node G] [--set k=v]...`
// Checks a job file (and that its training data exists and reads in its
// format) and prints the resolved job and its rank plan.
#include <cstdio>

#include "cli/commands.h"
#include "data/data_format.h"
#include "jobs/load.h"
#include "jobs/rank_plan.h"
#include "jobs/schema.h"

namespace cohort::cli {
namespace {

struct ValidateArgs {
  std::string job_file;
  int nodes = 0;
  int gpus_per_node = 0;
  std::vector<std::string> sets;
  bool reference = false;
};

// Every train.data source exists and reads in its format (a token file's
// header, JSONL's first lines): "file:line:column: path: reason" at the key.
std::string probe_train_data(const jobs::LoadResult& result) {
  const auto& t = result.spec.train;
  std::string errors;
  for (size_t i = 0; i < t.data.size(); ++i) {
    const auto& src = t.data[i];
    const std::string key = "train.data[" + std::to_string(i) + "]";
    auto format = data::parse_format(src.format.empty() ? t.data_format : src.format);
    auto probed = format ? data::probe_data(src.path, *format, src.text_field.empty() ? t.text_field : src.text_field)
                         : Result<data::DataFormat>(format.status());
    if (!probed) errors += result.position(key) + ": " + key + ": " + probed.status().message() + "\n";
    else std::printf("# %s: %s (%s)\n", key.c_str(), src.path.c_str(), data::format_name(*probed));
  }
  return errors;
}

// Each path as the workers will see it, and where it came from: relative
// ones in the file are the job file's folder's, --set ones the current
// directory's (jobs/load.h).
void print_paths(const jobs::LoadResult& result) {
  std::printf("# paths (relative ones in the file are from its folder, --set ones from the current directory):\n");
  for (const auto& p : jobs::job_paths(result)) {
    std::string shown = p.path.empty() ? p.given + " (not on PATH)" : p.path;
    std::printf("#   %-18s %s  (%s)\n", p.key.c_str(), shown.c_str(), p.origin.c_str());
  }
}

int run_validate(const ValidateArgs& args) {
  if (args.reference) {
    std::printf("%s", jobs::job_file_reference_markdown().c_str());
    return kExitOk;
  }
  if (args.job_file.empty()) {
    std::fprintf(stderr, "cohort validate: a job file is required\n");
    return kExitUsage;
  }
  jobs::LoadOptions options;
  for (const auto& s : args.sets) {
    auto o = jobs::parse_override(s);
    if (!o) {
      std::fprintf(stderr, "%s\n", o.status().message().c_str());
      return kExitUsage;
    }
    options.overrides.push_back(*o);
  }
  // --nodes and --gpus-per-node ask "what if": they are checked like overrides.
  if (args.nodes > 0) options.overrides.push_back({"job.nodes", std::to_string(args.nodes)});
  if (args.gpus_per_node > 0)
    options.overrides.push_back({"job.gpus_per_node", std::to_string(args.gpus_per_node)});

  auto result = jobs::load_job_file(args.job_file, options);
  for (const auto& w : result.warnings) std::fprintf(stderr, "%s: warning: %s\n", args.job_file.c_str(), w.c_str());
  if (!result.ok()) {
    std::fprintf(stderr, "%s", result.error_text().c_str());
    std::fprintf(stderr, "%s: %zu error%s\n", args.job_file.c_str(), result.errors.size(),
                 result.errors.size() == 1 ? "" : "s");
    return kExitUsage;
  }
  const auto& spec = result.spec;
  auto problems = jobs::check_job_paths(result);
  for (const auto& p : problems) std::fprintf(stderr, "%s\n", p.c_str());
  if (!problems.empty()) return kExitUsage;
  if (spec.job.kind == jobs::JobKind::kTrain) {
    const std::string errors = probe_train_data(result);
    if (!errors.empty()) {
      std::fprintf(stderr, "%s", errors.c_str());
      return kExitUsage;
    }
  }
  int tp = spec.parallel.tensor_parallel;
  if (spec.job.kind == jobs::JobKind::kInfer)
    tp = spec.infer.tensor_parallel > 0 ? spec.infer.tensor_parallel : spec.world_size(spec.job.nodes.max);
  if (spec.job.kind == jobs::JobKind::kServe) tp = spec.world_size(spec.job.nodes.max);
  if (spec.job.kind == jobs::JobKind::kCommand) tp = 1;
  std::printf("# %s is valid. Resolved job:\n%s\n", args.job_file.c_str(), jobs::to_toml(spec).c_str());
  print_paths(result);
  int nodes = spec.job.nodes.max;
  if (spec.job.nodes.elastic())
    std::printf("# elastic: %d to %d nodes; plan shown at %d\n", spec.job.nodes.min, nodes, nodes);
  std::printf("%s", jobs::format_rank_plan(jobs::plan_ranks(nodes, spec.job.gpus_per_node, tp), tp).c_str());
  if (spec.job.kind == jobs::JobKind::kTrain) {
    std::printf("global batch %d = micro_batch %d × data-parallel %d × accumulation %d\n",
                spec.effective_global_batch(nodes), spec.train.micro_batch, spec.data_parallel(nodes),
                spec.accumulation_steps(nodes));
  }
  return kExitOk;
}

}  // namespace

Command add_validate_command(CLI::App& root) {
  auto args = std::make_shared<ValidateArgs>();
  auto* app = root.add_subcommand("validate", "Check a job file; print the resolved job and rank plan");
  app->add_option("job", args->job_file, "The job file (TOML)");
  app->add_option("--nodes", args->nodes, "Plan for this many nodes")->check(CLI::PositiveNumber);
  app->add_option("--gpus-per-node", args->gpus_per_node, "Plan for this many GPUs per node")
      ->check(CLI::PositiveNumber);
  app->add_option("--set", args->sets, "Override a key: section.key=value (repeatable)");
  app->add_flag("--reference", args->reference, "Print the job file reference (Markdown) and exit");
  return Command{app, [args] { return run_validate(*args); }};
}

}  // namespace cohort::cli
