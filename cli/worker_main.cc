// `cohort-worker`: the built-in worker. Agents launch it once per rank with
// the resolved job file; it also runs under mpirun, srun or torchrun, which
// is where --set (the same overrides as `cohort run`) is for.
//
//   cohort-worker JOB.toml [--set key=value]...  train, infer or serve, as the job's kind says
//   cohort-worker export CHECKPOINT --to DIR [--dtype bf16] [--merge] [--json]   a Hugging Face folder from a
//                                 checkpoint (a LoRA one: its PEFT adapter folder, or merged into its base)
//   cohort-worker --version
// Exit codes as `cohort`'s (DESIGN §5): 2 for bad usage or an invalid job
// file or checkpoint; 143 for a stop asked by SIGTERM.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "base/log.h"
#include "cli/version.h"
#include "jobs/load.h"
#include "parallel/checkpoint.h"
#include "infer/infer_job.h"
#include "infer/serve_job.h"
#include "train/train_job.h"

namespace {

int report(const cohort::Status& status) {
  if (status.is_ok()) return 0;
  const char* rank = std::getenv("RANK");
  std::fprintf(stderr, "cohort-worker%s%s: %s\n", rank ? " rank " : "", rank ? rank : "",
               status.message().c_str());
  // A stop asked for by SIGTERM (preemption, cancel) ends like a terminated process.
  return cohort::train::stop_requested_by_signal() ? 143 : 1;
}

// `cohort-worker export`: 2 for a checkpoint that is missing or not one.
int report_export(const cohort::Status& status, const std::string& checkpoint, const std::string& to,
                  const std::string& dtype, bool json) {
  if (!status.is_ok()) {
    std::fprintf(stderr, "cohort-worker export: %s\n", status.message().c_str());
    const auto code = status.code();
    return code == cohort::StatusCode::kNotFound || code == cohort::StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (!json) {
    std::printf("exported %s to %s\n", checkpoint.c_str(), to.c_str());
    return 0;
  }
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(to, ec)) files.push_back(entry.path().filename());
  std::sort(files.begin(), files.end());
  nlohmann::json doc = {{"checkpoint", checkpoint}, {"to", to}, {"dtype", dtype}, {"files", files}};
  std::printf("%s\n", doc.dump(2).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cohort-worker: the built-in train and infer worker"};
  std::string job_file, log_level, checkpoint, to, dtype = "fp32";
  bool json = false, merge = false;
  app.set_version_flag("--version", cohort::cli::version_text("cohort-worker"));
  std::vector<std::string> sets;
  app.add_option("job", job_file, "The job file (TOML)");
  app.add_option("--set", sets, "override a key: --set train.lr=1e-3 (repeatable)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off");
  auto* export_cmd = app.add_subcommand("export", "Write a Hugging Face folder from a checkpoint");
  export_cmd->add_option("checkpoint", checkpoint, "The checkpoint folder")->required();
  export_cmd->add_option("--to", to, "The Hugging Face folder to write")->required();
  export_cmd->add_option("--dtype", dtype, "fp32 or bf16");
  export_cmd->add_option("--log-level", log_level, "trace, debug, info, warn, error or off");
  export_cmd->add_flag("--merge", merge, "LoRA checkpoints: the base with the adapters merged in");
  export_cmd->add_flag("--json", json, "print {\"checkpoint\", \"to\", \"dtype\", \"files\"} on stdout");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (auto status = cohort::init_logging(log_level, ""); !status) {
    std::fprintf(stderr, "cohort-worker: %s\n", status.message().c_str());
    return 2;
  }
  if (export_cmd->parsed()) {
    if (dtype != "fp32" && dtype != "bf16") {
      std::fprintf(stderr, "cohort-worker export: --dtype %s: fp32 or bf16\n", dtype.c_str());
      return 2;
    }
    checkpoint = cohort::parallel::resolve_checkpoint_path(checkpoint);  // a run's folder or `latest` too
    cohort::Status status = cohort::parallel::export_checkpoint(
        checkpoint, to, dtype == "bf16" ? cohort::models::DType::kBF16 : cohort::models::DType::kF32, merge);
    return report_export(status, checkpoint, to, dtype, json);
  }
  if (job_file.empty()) {
    std::fprintf(stderr, "cohort-worker: a job file is required\n");
    return 2;
  }
  cohort::jobs::LoadOptions load_options;
  for (const auto& set : sets) {
    auto o = cohort::jobs::parse_override(set);
    if (!o) {
      std::fprintf(stderr, "cohort-worker: %s\n", o.status().message().c_str());
      return 2;
    }
    load_options.overrides.push_back(*o);
  }
  auto loaded = cohort::jobs::load_job_file(job_file, load_options);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s", loaded.error_text().c_str());
    return 2;
  }
  const auto& spec = loaded.spec;
  switch (spec.job.kind) {
    case cohort::jobs::JobKind::kTrain: return report(cohort::train::run_train(spec));
    case cohort::jobs::JobKind::kInfer: return report(cohort::infer::run_infer(spec));
    case cohort::jobs::JobKind::kServe: return report(cohort::infer::run_serve(spec));
    case cohort::jobs::JobKind::kCommand:
      std::fprintf(stderr, "cohort-worker: %s is a command job; agents run its argv directly\n", job_file.c_str());
      return 2;
  }
  return 2;
}
