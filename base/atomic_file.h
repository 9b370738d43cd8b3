// Files written whole or not at all: the text goes to PATH.tmpPID, then is
// renamed over PATH, so a reader (another process, a restart after a crash)
// sees the old file or the new one, never half of one. `mode` applies from
// creation on (0600 for files that hold secrets). Errors name the file.
#pragma once

#include <string>

#include "base/status.h"

namespace cohort {

Status write_file_atomically(const std::string& path, const std::string& text, unsigned mode = 0644);

}  // namespace cohort
