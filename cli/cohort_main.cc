// `cohort`: parses the command line and hands over to the chosen subcommand.
// Global flags go anywhere (cli/global_flags.h); a refused command line gets
// a "did you mean" where one is close (cli/usage_hints.h) and exit code 2.
#include <cstdio>
#include <string>
#include <vector>

#include "base/log.h"
#include "cli/commands.h"
#include "cli/global_flags.h"
#include "cli/usage_hints.h"
#include "cli/version.h"

namespace {

void add_footers(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    sub->footer(cohort::cli::global_flags_footer());
    add_footers(*sub);
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace cohort::cli;
  CLI::App app{"cohort: distributed GPU training and sharded inference"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_text("cohort"));
  add_global_flags(app);  // before the subcommands, which inherit its fallthrough

  std::vector<Command> commands = {
      add_validate_command(app),
      add_run_command(app),
      add_serve_command(app),
      add_coordinator_command(app),
      add_agent_command(app),
      add_submit_command(app),
      add_status_command(app),
      add_jobs_command(app),
      add_history_command(app),
      add_nodes_command(app),
      add_logs_command(app),
      add_cancel_command(app),
      add_drain_command(app),
      add_undrain_command(app),
      add_keygen_command(app),
      add_export_command(app),
      add_tokenize_command(app),
      add_completion_command(app),
      add_help_command(app),
  };
  add_footers(app);

  // `cohort run [...] -- PROGRAM ARGS...`: the program's words are its own.
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) != "--") continue;
    bool run = false;
    for (int j = 1; j < i; ++j) run |= std::string(argv[j]) == "run";
    if (run) {
      set_run_program_argv(std::vector<std::string>(argv + i + 1, argv + argc));
      argc = i;
    }
    break;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    if (const std::string hint = usage_hint(app); !hint.empty()) {
      std::fprintf(stderr, "%s\n", hint.c_str());
      return kExitUsage;
    }
    app.exit(e);
    return kExitUsage;
  }
  const CLI::App* command = parsed_command(app);
  if (global_flags().json && !prints_json(*command)) {
    std::fprintf(stderr, "%s: --json: this command prints no JSON\n", command_path(*command).c_str());
    return kExitUsage;
  }
  if (auto status = cohort::init_logging(global_flags().log_level, ""); !status) {
    std::fprintf(stderr, "cohort: %s\n", status.message().c_str());
    return kExitUsage;
  }
  for (auto& command : commands) {
    if (command.app->parsed()) return command.run();
  }
  return kExitUsage;
}
