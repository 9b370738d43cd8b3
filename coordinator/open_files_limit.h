// The coordinator holds a descriptor or more per connected agent and client
// (its ZeroMQ connections), plus its SQLite files and HTTP connections. The
// default soft limit of many distributions (1,024) is far below what a
// cluster of a thousand nodes needs, while the hard limit usually allows
// more, so the coordinator raises its soft limit to the hard one at start.
#pragma once

#include <cstdint>

#include "base/status.h"

namespace cohort::coordinator {

struct OpenFilesLimit {
  uint64_t before = 0;  // the soft limit found
  uint64_t after = 0;   // the soft limit now
  uint64_t hard = 0;    // the hard limit (UINT64_MAX: unlimited)
};

// Raises RLIMIT_NOFILE's soft limit to its hard limit (to the kernel's
// fs.nr_open where the hard limit is unlimited). Never lowers it. Errors name
// the call that failed; the process keeps its old limit then.
Result<OpenFilesLimit> raise_open_files_limit();

}  // namespace cohort::coordinator
