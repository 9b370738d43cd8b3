// The `cohort` subcommands. Each lives in its own file, adds itself to the
// CLI11 app, and returns a runner that does the work by calling into a library
// and returns the process exit code (DESIGN §5: 0 ok, 1 job failed, 2 bad
// usage or invalid job file, 3 coordinator unreachable, 130 interrupted).
#pragma once

#include <functional>
#include <vector>

#include <CLI/CLI.hpp>

#include "base/status.h"

namespace cohort::cli {

constexpr int kExitOk = 0;
constexpr int kExitJobFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitUnreachable = 3;
constexpr int kExitInterrupted = 130;  // 128 + SIGINT, as shells report Ctrl-C

// The exit code of a failure: 3 when the coordinator did not answer, 2 for
// bad input (invalid, not found, refused as it stands), 1 otherwise.
inline int exit_code_for(const Status& status) {
  switch (status.code()) {
    case StatusCode::kUnavailable: return kExitUnreachable;
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound: return kExitUsage;
    default: return kExitJobFailed;
  }
}

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_validate_command(CLI::App& root);
// The control plane (cli/<name>_command.cc).
Command add_run_command(CLI::App& root);
Command add_serve_command(CLI::App& root);  // cli/run_command.cc
// `cohort run ... -- PROGRAM ARGS...`: main hands the words after "--" to the
// run command before parsing, so that none of them is taken as cohort's flag.
void set_run_program_argv(std::vector<std::string> argv);
Command add_coordinator_command(CLI::App& root);
Command add_agent_command(CLI::App& root);
Command add_submit_command(CLI::App& root);
Command add_status_command(CLI::App& root);
Command add_jobs_command(CLI::App& root);
Command add_nodes_command(CLI::App& root);
Command add_logs_command(CLI::App& root);
Command add_cancel_command(CLI::App& root);
Command add_drain_command(CLI::App& root);    // cli/drain_command.cc
Command add_undrain_command(CLI::App& root);
Command add_keygen_command(CLI::App& root);
Command add_export_command(CLI::App& root);
Command add_tokenize_command(CLI::App& root);
Command add_history_command(CLI::App& root);  // finished jobs (cli/history_command.cc)
// `cohort help [COMMAND...]`; `root` must outlive the run.
Command add_help_command(CLI::App& root);
// Shell completion, made from `root`'s definition (which must outlive the run).
Command add_completion_command(CLI::App& root);

}  // namespace cohort::cli
