// `cohort`: parses the command line and hands over to the chosen subcommand.
#include <cstdio>
#include <string>
#include <vector>

#include "base/log.h"
#include "cli/commands.h"

int main(int argc, char** argv) {
  using namespace cohort::cli;
  CLI::App app{"cohort: distributed GPU training and sharded inference"};
  app.require_subcommand(1);
  std::string log_level;
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off (default: $COHORT_LOG or info)");

  std::vector<Command> commands = {
      add_validate_command(app),
      add_run_command(app),
      add_coordinator_command(app),
      add_agent_command(app),
      add_submit_command(app),
      add_status_command(app),
      add_jobs_command(app),
      add_nodes_command(app),
      add_logs_command(app),
      add_cancel_command(app),
      add_drain_command(app),
      add_undrain_command(app),
      add_keygen_command(app),
      add_export_command(app),
      add_tokenize_command(app),
  };

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }
  if (auto status = cohort::init_logging(log_level, ""); !status) {
    std::fprintf(stderr, "cohort: %s\n", status.message().c_str());
    return kExitUsage;
  }
  for (auto& command : commands) {
    if (command.app->parsed()) return command.run();
  }
  return kExitUsage;
}
