// What `cohort` says when CLI11 refuses a command line: the mistyped
// subcommand or flag and the nearest known one ("did you mean 'submit'?"),
// and the refusal of --json where a command prints no JSON. Both mean exit
// code 2 (DESIGN §5).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace cohort::cli {

// After app.parse threw: a one-line hint naming the first word the parser
// could not place, with the nearest subcommand or flag where one is close;
// "" when the parser's own message says it better.
std::string usage_hint(const CLI::App& root);

// The deepest subcommand that was parsed (root itself when none was).
const CLI::App* parsed_command(const CLI::App& root);

// "cohort a b", the command path of `app` for messages.
std::string command_path(const CLI::App& app);

// True when `command` or a subcommand above it (not the root) has its own
// --json: the command prints JSON.
bool prints_json(const CLI::App& command);

}  // namespace cohort::cli
