// The version strings; COHORT_GIT_COMMIT comes from the header the build
// regenerates at every build (cli/git_commit.cmake), so it names the commit
// that was built rather than the one that was configured.
#include "cli/version.h"

#include "cohort_git_commit.h"

namespace cohort::cli {

const char* version_number() {
  return COHORT_VERSION;
}
const char* git_commit() {
  return COHORT_GIT_COMMIT;
}

std::string version_text(const std::string& program) {
  std::string text = program + " " + version_number();
  if (*git_commit() != '\0') text += std::string(" (commit ") + git_commit() + ")";
  return text;
}

}  // namespace cohort::cli
