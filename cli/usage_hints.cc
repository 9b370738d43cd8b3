// "did you mean" for the command line (cli/usage_hints.h). Every flag the
// parser could not place falls through to the root app (global_flags.h), so
// the root's leftovers hold the first unknown word; the candidates are the
// flags of the command being parsed and of the apps above it.
#include "cli/usage_hints.h"

#include <vector>

#include "jobs/schema.h"

namespace cohort::cli {
namespace {

// "--jsno=1" → "jsno"; "-x" → "x".
std::string flag_name(const std::string& word) {
  const size_t start = word.find_first_not_of('-');
  if (start == std::string::npos) return "";  // "--" alone
  std::string name = word.substr(start);
  return name.substr(0, name.find('='));
}

std::vector<std::string> flag_names(const CLI::App& command) {
  std::vector<std::string> names;
  for (const CLI::App* app = &command; app; app = app->get_parent()) {
    for (const CLI::Option* opt : app->get_options()) {
      for (const auto& l : opt->get_lnames()) names.push_back(l);
    }
  }
  return names;
}

std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
  }
  return names;
}

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : ", ") + w;
  return out;
}

}  // namespace

const CLI::App* parsed_command(const CLI::App& root) {
  const CLI::App* app = &root;
  while (true) {
    auto parsed = app->get_subcommands();
    if (parsed.empty()) return app;
    app = parsed.front();
  }
}

std::string command_path(const CLI::App& app) {
  std::string path;
  for (const CLI::App* a = &app; a; a = a->get_parent()) {
    const std::string name = a->get_parent() ? a->get_name() : "cohort";
    path = path.empty() ? name : name + " " + path;
  }
  return path;
}

bool prints_json(const CLI::App& command) {
  for (const CLI::App* app = &command; app && app->get_parent(); app = app->get_parent()) {
    if (app->get_option_no_throw("--json")) return true;
  }
  return false;
}

std::string usage_hint(const CLI::App& root) {
  const CLI::App& command = *parsed_command(root);
  const std::string path = command_path(command);
  const auto left = root.remaining(true);
  if (left.empty()) {
    if (&command != &root || !root.get_subcommands().empty()) return "";
    return "cohort: a command is required: " + join(subcommand_names(root)) +
           " (cohort --help says what each does)";
  }
  const std::string& word = left.front();
  if (word.size() > 1 && word[0] == '-') {
    const std::string near = jobs::nearest_name(flag_name(word), flag_names(command));
    return path + ": unknown flag " + word.substr(0, word.find('=')) +
           (near.empty() ? "" : "; did you mean --" + near + "?") + " (" + path +
           " --help lists its flags)";
  }
  // A word where a subcommand goes (the root, or `jobs` before `rm`).
  const auto subs = subcommand_names(command);
  if (subs.empty()) return "";
  const std::string near = jobs::nearest_name(word, subs);
  return path + ": '" + word + "' is not a " + (&command == &root ? "command" : "subcommand") +
         (near.empty() ? "" : "; did you mean '" + near + "'?") + " (" + path +
         " --help lists them)";
}

}  // namespace cohort::cli
