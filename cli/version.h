// What `cohort --version` and `cohort-worker --version` print: the CMake
// project version and the git commit the binaries were built from
// ("cohort 0.1.0 (commit 1a2b3c4d5e6f)"; "-dirty" when the work tree had
// uncommitted changes; no commit outside a git checkout).
#pragma once

#include <string>

namespace cohort::cli {

const char* version_number();  // "0.1.0"
const char* git_commit();      // "1a2b3c4d5e6f", "1a2b3c4d5e6f-dirty" or ""
// "<program> 0.1.0 (commit …)".
std::string version_text(const std::string& program);

}  // namespace cohort::cli
