// `cohort export CHECKPOINT --to DIR [--dtype bf16] [--merge]`: a consolidated
// Hugging Face folder (config.json, safetensors, the tokenizer files and
// generation_config.json) from a sharded checkpoint; from a LoRA run's
// checkpoint, its PEFT adapter folder (adapter_config.json,
// adapter_model.safetensors), or with --merge the base with the adapters
// merged in. The work needs the
// model libraries, which the control-plane binary does not link, so this
// runs `cohort-worker export` from beside the `cohort` binary, whose exit
// code it keeps (2 for a missing or invalid checkpoint). With --json:
// {"checkpoint", "to", "dtype", "files"}.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/global_flags.h"

namespace cohort::cli {
namespace {

struct ExportArgs {
  std::string checkpoint, to, dtype = "fp32";
  bool merge = false;
  JsonFlag json;
};

int run_export(const ExportArgs& args) {
  std::error_code ec;
  if (!std::filesystem::exists(args.checkpoint, ec)) {
    std::fprintf(stderr, "cohort export: %s: no such folder (give a checkpoint folder or a run's output_dir)\n",
                 args.checkpoint.c_str());
    return kExitUsage;
  }
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  std::string worker = ec ? "cohort-worker" : (self.parent_path() / "cohort-worker").string();
  if (!ec && !std::filesystem::exists(worker)) {
    std::fprintf(stderr, "cohort export: %s is missing (build the worker: scripts/build.sh)\n", worker.c_str());
    return kExitUsage;
  }
  // The worker resolves a run's folder or a `latest` file to its checkpoint
  // (parallel::resolve_checkpoint_path, as [model] checkpoint does).
  const std::string& checkpoint = args.checkpoint;
  if (args.dtype != "fp32" && args.dtype != "bf16") {
    std::fprintf(stderr, "cohort export: --dtype %s: fp32 or bf16\n", args.dtype.c_str());
    return kExitUsage;
  }
  std::vector<const char*> argv = {worker.c_str(), "export", checkpoint.c_str(), "--to", args.to.c_str(),
                                   "--dtype", args.dtype.c_str()};
  if (args.merge) argv.push_back("--merge");
  if (args.json.on()) argv.push_back("--json");
  argv.push_back(nullptr);
  ::execvp(argv[0], const_cast<char* const*>(argv.data()));
  std::perror(("cohort export: cannot run " + worker).c_str());
  return kExitUsage;
}

}  // namespace

Command add_export_command(CLI::App& root) {
  auto args = std::make_shared<ExportArgs>();
  auto* app = root.add_subcommand("export", "Write a Hugging Face folder (config.json, safetensors, tokenizer files) from a checkpoint");
  app->add_option("checkpoint", args->checkpoint, "A checkpoint folder, or a run's output_dir (its latest)")->required();
  app->add_option("--to", args->to, "The folder to write")->required();
  app->add_option("--dtype", args->dtype, "Weights as fp32 (default) or bf16");
  app->add_flag("--merge", args->merge, "A LoRA checkpoint: write its base with the adapters merged in, not the PEFT "
                                        "adapter folder");
  args->json.add_to(app);
  return Command{app, [args] { return run_export(*args); }};
}

}  // namespace cohort::cli
