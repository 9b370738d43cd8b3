// Logging set-up, in one place: spdlog to stderr, level from --log-level or
// the COHORT_LOG environment variable (trace, debug, info, warn, error, off).
#pragma once

#include <string>

#include "base/status.h"

namespace cohort {

// Configures the default spdlog logger. `level` wins over COHORT_LOG when not
// empty. `component` ("coordinator", "agent", "worker 3") prefixes each line.
// Returns an error naming the bad level, leaving the logger at "info".
Status init_logging(const std::string& level, const std::string& component);

}  // namespace cohort
