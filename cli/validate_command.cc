// `cohort validate JOB.toml [--nodes N] [--gpus-per-node G] [--set k=v]... [--json]`
// Checks a job file (that its training data exists and reads in its format,
// and that its model opens as the worker opens it) and prints the resolved
// job and its rank plan. With --json, one
// document: {"file", "valid", "errors": [{"source", "line", "column",
// "message"}], "warnings", and when valid "resolved_toml", "data",
// "nodes", "world_size", "tensor_parallel", "rank_plan", "global_batch", and
// with [lora] "lora": the adapters' plan}.
#include <cstdio>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/global_flags.h"
#include "data/data_format.h"
#include "cli/model_probe.h"
#include "jobs/load.h"
#include "jobs/rank_plan.h"
#include "jobs/schema.h"
#include "hf/peft_config.h"
#include "models/lora_config.h"

namespace cohort::cli {
namespace {

struct ValidateArgs {
  std::string job_file;
  int nodes = 0;
  int gpus_per_node = 0;
  std::vector<std::string> sets;
  bool reference = false;
  JsonFlag json;
};

nlohmann::json error_json(const std::string& source, int line, int column, const std::string& message) {
  return {{"source", source}, {"line", line}, {"column", column}, {"message", message}};
}

// Every train.data source exists and reads in its format (a token file's
// header, JSONL's first lines). Text errors read "file:line:column: key:
// reason" at the key.
struct DataProbe {
  nlohmann::json sources = nlohmann::json::array();  // {"key", "path", "format"}
  nlohmann::json errors = nlohmann::json::array();
  std::string error_text;
};

void add_error(DataProbe& probe, const jobs::LoadResult& result, const std::string& key, const std::string& message) {
  probe.error_text += result.position(key) + ": " + message + "\n";
  probe.errors.push_back(error_json(result.position(key), 0, 0, message));
}

DataProbe probe_train_data(const jobs::LoadResult& result) {
  const auto& t = result.spec.train;
  DataProbe probe;
  for (size_t i = 0; i < t.data.size(); ++i) {
    const auto& src = t.data[i];
    const std::string key = "train.data[" + std::to_string(i) + "]";
    auto format = data::parse_format(src.format.empty() ? t.data_format : src.format);
    auto probed = format ? data::probe_data(src.path, *format, src.text_field.empty() ? t.text_field : src.text_field)
                         : Result<data::DataFormat>(format.status());
    if (!probed) {
      const std::string message = key + ": " + probed.status().message();
      probe.error_text += result.position(key) + ": " + message + "\n";
      probe.errors.push_back(error_json(result.position(key), 0, 0, message));
    } else {
      probe.sources.push_back({{"key", key}, {"path", src.path}, {"format", data::format_name(*probed)}});
    }
  }
  return probe;
}

// [lora] as the worker will run it: the adapters' shape and scale, and
// what they train against the whole model (when its config could be read).
struct LoraPlan {
  std::vector<std::string> lines;
  nlohmann::json json;  // null without [lora]
  std::string error;
};

LoraPlan plan_lora(const jobs::JobSpec& spec, const std::optional<models::ModelConfig>& model) {
  const auto& l = spec.lora;
  LoraPlan plan;
  auto config = models::make_lora_config(l.rank, l.alpha, l.dropout, l.target_modules, l.use_rslora, l.init,
                                         l.base_dtype);
  if (config && !l.adapter.empty()) {
    // The folder's adapters, with the job's dropout and base (as the worker runs them).
    auto folder = hf::read_peft_config(l.adapter);
    if (!folder) {
      plan.error = "lora.adapter: " + folder.status().message();
      return plan;
    }
    folder->lora.dropout = config->dropout;
    folder->lora.base_dtype = config->base_dtype;
    config = folder->lora;
  }
  if (!config) {
    plan.error = config.status().message();
    return plan;
  }
  plan.lines.push_back(models::describe(*config));
  if (!l.adapter.empty()) plan.lines.back() += "; starting from the adapters in " + l.adapter;
  nlohmann::json targets = nlohmann::json::array();
  for (auto t : config->targets) targets.push_back(models::peft_module_name(t));
  plan.json = {{"rank", config->rank}, {"alpha", config->alpha}, {"scale", config->scale()},
               {"dropout", config->dropout}, {"target_modules", targets}, {"use_rslora", config->use_rslora},
               {"init", models::to_string(config->init)}, {"base_dtype", l.base_dtype}};
  if (!l.adapter.empty()) plan.json["adapter"] = l.adapter;
  if (model) {
    const int64_t trained = models::lora_parameter_count(*model, *config), total = model->num_parameters();
    plan.lines.push_back(fmt::format("{} trainable parameters in {} layers ({:.3g}% of the model's {}); the base "
                                     "has no gradients, optimizer moments or master copy",
                                     trained, model->layers, 100.0 * double(trained) / double(total), total));
    plan.json["trainable_parameters"] = trained;
    plan.json["model_parameters"] = total;
  }
  return plan;
}

// An invalid file: the errors as text on stderr (already printed) or as the
// JSON document on stdout; exit code 2.
int invalid(const ValidateArgs& args, const nlohmann::json& errors, const nlohmann::json& warnings) {
  if (args.json.on()) {
    print_json({{"file", args.job_file}, {"valid", false}, {"errors", errors}, {"warnings", warnings}});
  }
  return kExitUsage;
}

int tensor_parallel_of(const jobs::JobSpec& spec) {
  switch (spec.job.kind) {
    case jobs::JobKind::kInfer:
      return spec.infer.tensor_parallel > 0 ? spec.infer.tensor_parallel : spec.world_size(spec.job.nodes.max);
    case jobs::JobKind::kServe: return spec.world_size(spec.job.nodes.max);
    case jobs::JobKind::kCommand: return 1;
    case jobs::JobKind::kTrain: break;
  }
  return spec.parallel.tensor_parallel;
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
  const bool json = args.json.on();
  if (args.job_file.empty()) {
    std::fprintf(stderr, "cohort validate: a job file is required\n");
    return kExitUsage;
  }
  jobs::LoadOptions options;
  for (const auto& s : args.sets) {
    auto o = jobs::parse_override(s);
    if (!o) {
      std::fprintf(stderr, "%s\n", o.status().message().c_str());
      return invalid(args, {error_json("--set " + s, 0, 0, o.status().message())}, nlohmann::json::array());
    }
    options.overrides.push_back(*o);
  }
  // --nodes and --gpus-per-node ask "what if": they are checked like overrides.
  if (args.nodes > 0) options.overrides.push_back({"job.nodes", std::to_string(args.nodes)});
  if (args.gpus_per_node > 0)
    options.overrides.push_back({"job.gpus_per_node", std::to_string(args.gpus_per_node)});

  auto result = jobs::load_job_file(args.job_file, options);
  for (const auto& w : result.warnings) std::fprintf(stderr, "%s: warning: %s\n", args.job_file.c_str(), w.c_str());
  const nlohmann::json warnings = result.warnings;
  if (!result.ok()) {
    std::fprintf(stderr, "%s", result.error_text().c_str());
    std::fprintf(stderr, "%s: %zu error%s\n", args.job_file.c_str(), result.errors.size(),
                 result.errors.size() == 1 ? "" : "s");
    nlohmann::json errors = nlohmann::json::array();
    for (const auto& e : result.errors) errors.push_back(error_json(e.source, e.line, e.column, e.message));
    return invalid(args, errors, warnings);
  }
  const auto& spec = result.spec;
  auto problems = jobs::check_job_paths(result);
  for (const auto& p : problems) std::fprintf(stderr, "%s\n", p.c_str());
  if (!problems.empty()) {
    nlohmann::json errors = nlohmann::json::array();
    for (const auto& p : problems) errors.push_back(error_json(args.job_file, 0, 0, p));
    return invalid(args, errors, warnings);
  }
  DataProbe probe;
  if (spec.job.kind == jobs::JobKind::kTrain) probe = probe_train_data(result);
  std::optional<models::ModelConfig> model_config;
  for (const ModelProblem& p : probe_model(result, &model_config)) add_error(probe, result, p.key, p.message);
  const LoraPlan lora = spec.job.kind == jobs::JobKind::kTrain && spec.has_lora ? plan_lora(spec, model_config)
                                                                                : LoraPlan{};
  if (!lora.error.empty()) add_error(probe, result, "lora", lora.error);
  if (!probe.errors.empty()) {
    std::fprintf(stderr, "%s", probe.error_text.c_str());
    return invalid(args, probe.errors, warnings);
  }
  const int tp = tensor_parallel_of(spec);
  const int nodes = spec.job.nodes.max;
  const auto plan = jobs::plan_ranks(nodes, spec.job.gpus_per_node, tp);
  if (json) {
    nlohmann::json ranks = nlohmann::json::array();
    for (const auto& r : plan) {
      ranks.push_back({{"rank", r.rank}, {"node_rank", r.node_rank}, {"local_rank", r.local_rank},
                       {"dp_rank", r.dp_rank}, {"tp_rank", r.tp_rank}});
    }
    nlohmann::json doc = {{"file", args.job_file},      {"valid", true},
                          {"errors", nlohmann::json::array()}, {"warnings", warnings},
                          {"resolved_toml", jobs::to_toml(spec)}, {"data", probe.sources},
                          {"nodes", nodes},              {"world_size", spec.world_size(nodes)},
                          {"tensor_parallel", tp},       {"rank_plan", ranks}};
    if (spec.job.kind == jobs::JobKind::kTrain) {
      doc["global_batch"] = {{"global_batch", spec.effective_global_batch(nodes)},
                             {"micro_batch", spec.train.micro_batch},
                             {"data_parallel", spec.data_parallel(nodes)},
                             {"accumulation", spec.accumulation_steps(nodes)}};
    }
    if (!lora.json.is_null()) doc["lora"] = lora.json;
    print_json(doc);
    return kExitOk;
  }
  for (const auto& s : probe.sources) {
    std::printf("# %s: %s (%s)\n", s["key"].get<std::string>().c_str(), s["path"].get<std::string>().c_str(),
                s["format"].get<std::string>().c_str());
  }
  std::printf("# %s is valid. Resolved job:\n%s\n", args.job_file.c_str(), jobs::to_toml(spec).c_str());
  print_paths(result);
  if (spec.job.nodes.elastic())
    std::printf("# elastic: %d to %d nodes; plan shown at %d\n", spec.job.nodes.min, nodes, nodes);
  std::printf("%s", jobs::format_rank_plan(plan, tp).c_str());
  if (spec.job.kind == jobs::JobKind::kTrain) {
    std::printf("global batch %d = micro_batch %d × data-parallel %d × accumulation %d\n",
                spec.effective_global_batch(nodes), spec.train.micro_batch, spec.data_parallel(nodes),
                spec.accumulation_steps(nodes));
  }
  for (const auto& line : lora.lines) std::printf("lora: %s\n", line.c_str());
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
  args->json.add_to(app);
  return Command{app, [args] { return run_validate(*args); }};
}

}  // namespace cohort::cli
