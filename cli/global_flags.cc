// The root app's global flags (cli/global_flags.h).
#include "cli/global_flags.h"

#include <cstdio>

namespace cohort::cli {
namespace {
GlobalFlags g_flags;
}  // namespace

const GlobalFlags& global_flags() {
  return g_flags;
}

const char* global_flags_footer() {
  return "Global flags (before or after the subcommand): --log-level LEVEL, --coordinator ADDR, "
         "--keys DIR, --json, --version\n";
}

void add_global_flags(CLI::App& root) {
  root.add_option("--log-level", g_flags.log_level,
                  "trace, debug, info, warn, error or off (default: $COHORT_LOG or info)");
  root.add_option(
      "--coordinator", g_flags.coordinator,
      "coordinator address, tcp://HOST:PORT or HOST:PORT (default: $COHORT_COORDINATOR or "
      "tcp://127.0.0.1:7070)");
  root.add_option("--keys", g_flags.keys,
                  "CURVE key directory from `cohort keygen` (default: $COHORT_KEYS)");
  root.add_flag("--json", g_flags.json,
                "print one JSON document on stdout (commands that print results)");
  root.fallthrough();
}

void JsonFlag::add_to(CLI::App* app) {
  app->add_flag("--json", given, "print one JSON document on stdout");
}

void print_json(const nlohmann::json& j) {
  std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  std::fflush(stdout);
}

}  // namespace cohort::cli
