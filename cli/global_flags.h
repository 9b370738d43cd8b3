// The flags every `cohort` subcommand takes, before or after its name
// (DESIGN §5): --log-level, --coordinator, --keys and --json. They sit on the
// root app and every subcommand falls through to it for flags it does not
// know; client commands also list --coordinator/--keys (ClientFlags) and
// --json (JsonFlag) in their own --help, and whichever is given wins.
//
// Threading: set once while parsing the command line, read afterwards.
#pragma once

#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace cohort::cli {

struct GlobalFlags {
  std::string log_level;    // empty: $COHORT_LOG or info
  std::string coordinator;  // empty: $COHORT_COORDINATOR or tcp://127.0.0.1:7070
  std::string keys;         // empty: $COHORT_KEYS or none
  bool json = false;
};

const GlobalFlags& global_flags();
// Registers the flags on the root app and makes its subcommands (those added
// afterwards) fall through to it.
void add_global_flags(CLI::App& root);
// The footer each subcommand's --help ends with.
const char* global_flags_footer();

// `--json` of a command that prints JSON: one document on stdout, the field
// names documented in docs/cluster-operations.md; messages for people stay on
// stderr.
struct JsonFlag {
  bool given = false;
  void add_to(CLI::App* app);
  bool on() const { return given || global_flags().json; }
};

// Prints `j` as one indented document (invalid UTF-8 replaced) on stdout.
void print_json(const nlohmann::json& j);

}  // namespace cohort::cli
