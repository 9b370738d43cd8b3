#include "base/log.h"
#include "base/env_knobs.h"

#include <cstdlib>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace cohort {

Status init_logging(const std::string& level, const std::string& component) {
  std::string chosen = level;
  if (chosen.empty()) {
    const char* env = read_env_knob(EnvKnob::kLog);
    chosen = env ? env : "info";
  }
  std::string name = component.empty() ? "cohort" : component;
  // Called again (tests, `cohort run` naming its parts): replace, don't throw.
  spdlog::drop(name);
  auto logger = spdlog::stderr_color_mt(name);
  spdlog::set_default_logger(logger);
  spdlog::set_pattern(component.empty() ? "[%H:%M:%S.%e] [%^%l%$] %v"
                                        : "[%H:%M:%S.%e] [%n] [%^%l%$] %v");
  auto parsed = spdlog::level::from_str(chosen);
  // from_str answers "off" for anything it does not know; only "off" means off.
  if (parsed == spdlog::level::off && chosen != "off") {
    spdlog::set_level(spdlog::level::info);
    return invalid_argument("unknown log level '" + chosen +
                            "' (use trace, debug, info, warn, error or off)");
  }
  spdlog::set_level(parsed);
  return Status::ok();
}

}  // namespace cohort
