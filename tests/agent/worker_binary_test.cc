// Which cohort-worker an agent launches: --worker-binary, checked at start,
// or the one beside the running program.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "agent/agent.h"

namespace cohort::agent {
namespace {

namespace fs = std::filesystem;

TEST(WorkerBinary, AGivenPathThatIsNotThereStopsTheAgentAtStart) {
  std::string path = "/nonexistent/cohort-worker";
  Status s = resolve_worker_binary(&path);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("--worker-binary /nonexistent/cohort-worker: No such file or directory"),
            std::string::npos)
      << s.to_string();
}

TEST(WorkerBinary, AGivenPathThatCannotRunIsRefused) {
  std::string dir = fs::temp_directory_path() / ("cohort-wb-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string path = dir + "/cohort-worker";
  std::ofstream(path) << "#!/bin/sh\n";
  ::chmod(path.c_str(), 0644);
  std::string given = path;
  Status s = resolve_worker_binary(&given);  // no execute bit: refused, even for root
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find(path + ": Permission denied"), std::string::npos) << s.to_string();
  ::chmod(path.c_str(), 0755);
  given = path;
  EXPECT_TRUE(resolve_worker_binary(&given).is_ok());
  EXPECT_EQ(given, path);
  fs::remove_all(dir);
}

TEST(WorkerBinary, NoneGivenIsTheOneBesideThisProgram) {
  std::string beside = fs::read_symlink("/proc/self/exe").parent_path() / "cohort-worker";
  std::string path;
  ASSERT_TRUE(resolve_worker_binary(&path).is_ok());
  EXPECT_EQ(path, fs::exists(beside) ? beside : "");
}

}  // namespace
}  // namespace cohort::agent
