// `cohort help [SUBCOMMAND...]`: what `cohort [SUBCOMMAND...] --help` prints,
// as git and most CLIs also answer it.
#include <cstdio>

#include "cli/commands.h"

namespace cohort::cli {

Command add_help_command(CLI::App& root) {
  auto path = std::make_shared<std::vector<std::string>>();
  CLI::App* app = root.add_subcommand("help", "show the help of cohort or of a command: cohort help submit");
  app->add_option("command", *path, "a command (and subcommand: cohort help jobs rm)");
  return {app, [path, &root] {
            CLI::App* at = &root;
            std::string walked = "cohort";
            for (const auto& name : *path) {
              CLI::App* next = nullptr;
              for (CLI::App* sub : at->get_subcommands({})) {
                if (sub->get_name() == name) next = sub;
              }
              if (!next) {
                std::fprintf(stderr, "cohort help: %s has no command '%s' (see `%s --help`)\n", walked.c_str(),
                             name.c_str(), walked.c_str());
                return kExitUsage;
              }
              at = next;
              walked += " " + name;
            }
            // The formatter, not App::help, which would show the parsed
            // subcommand's (this one's) help instead.
            std::printf("%s", at->get_formatter()->make_help(at, walked, CLI::AppFormatMode::Normal).c_str());
            return kExitOk;
          }};
}

}  // namespace cohort::cli
