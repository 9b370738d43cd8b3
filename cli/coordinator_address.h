// Control-plane addresses as people type them: "tcp://HOST:PORT",
// "ipc://PATH", or a bare "HOST:PORT", which is taken as tcp://. Anything
// else is refused here with a hint (exit code 2) instead of reaching ZeroMQ,
// whose only word for it is "Invalid argument".
#pragma once

#include <string>

#include "base/status.h"

namespace cohort::cli {

// `text` as a ZeroMQ endpoint; `what` names where it came from ("--listen")
// in the error. Ports may be 0 or * (bind to any free port).
Result<std::string> normalize_endpoint(const std::string& text, const std::string& what);

// --coordinator `flag`, else $COHORT_COORDINATOR, else tcp://127.0.0.1:7070,
// normalised; an error names the flag or the variable.
Result<std::string> coordinator_endpoint(const std::string& flag);

}  // namespace cohort::cli
