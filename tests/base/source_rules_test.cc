// Rules about where code may live, checked over the source tree (DESIGN §2,
// "one vocabulary per concept"): a COHORT_* variable is read only through
// base/env_knobs, and NCCL is called only from collective/nccl/. Test code
// is exempt (it may call NCCL to check cohort, or read its own switches).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace cohort {
namespace {

namespace fs = std::filesystem;

// The C++ and CUDA sources outside tests/ and build folders, relative to
// the source root, for which `offends(text)` holds.
std::vector<std::string> sources_where(const std::function<bool(const std::string&)>& offends) {
  std::vector<std::string> found;
  const fs::path root(COHORT_SOURCE_DIR);
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    const std::string name = it->path().filename().string();
    if (it->is_directory()) {
      if (it.depth() == 0 && (name == "tests" || name.rfind("build", 0) == 0 || name[0] == '.'))
        it.disable_recursion_pending();
      continue;
    }
    const std::string ext = it->path().extension().string();
    if (ext != ".cc" && ext != ".h" && ext != ".cu" && ext != ".cuh") continue;
    std::ifstream in(it->path());
    std::stringstream text;
    text << in.rdbuf();
    if (offends(text.str())) found.push_back(fs::relative(it->path(), root).string());
  }
  return found;
}

bool starts_with(const std::string& path, const char* prefix) {
  return path.rfind(prefix, 0) == 0;
}

std::string listed(const std::vector<std::string>& paths) {
  std::string out;
  for (const auto& p : paths) out += "\n  " + p;
  return out;
}

TEST(SourceRules, OnlyEnvKnobsReadsACohortVariable) {
  std::vector<std::string> bad;
  for (const auto& path : sources_where([](const std::string& text) {
         return text.find("getenv(\"COHORT_") != std::string::npos;
       })) {
    if (path != "base/env_knobs.cc") bad.push_back(path);
  }
  EXPECT_TRUE(bad.empty()) << "read COHORT_* with getenv; add an EnvKnob (base/env_knobs.h) and "
                              "use read_env_knob:"
                           << listed(bad);
}

TEST(SourceRules, OnlyCollectiveNcclCallsNccl) {
  std::vector<std::string> bad;
  for (const auto& path : sources_where([](const std::string& text) {
         for (size_t at = text.find("nccl"); at != std::string::npos;
              at = text.find("nccl", at + 4)) {
           const char next = at + 4 < text.size() ? text[at + 4] : '\0';
           if (next >= 'A' && next <= 'Z') return true;
         }
         return false;
       })) {
    if (!starts_with(path, "collective/nccl/")) bad.push_back(path);
  }
  EXPECT_TRUE(bad.empty()) << "name NCCL's API outside collective/nccl/ (go through "
                              "NcclCommunicator, or add the call there):"
                           << listed(bad);
}

}  // namespace
}  // namespace cohort
