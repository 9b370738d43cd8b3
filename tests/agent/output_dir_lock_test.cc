// OutputDirLock: one writer per output folder, and a refusal that names the
// folder and its holder.
#include "agent/output_dir_lock.h"

#include <stdlib.h>

#include <filesystem>
#include <optional>

#include <gtest/gtest.h>

namespace cohort::agent {
namespace {

std::string temp_dir() {
  char templ[] = "/tmp/cohort-lock-XXXXXX";
  return ::mkdtemp(templ);
}

TEST(OutputDirLock, ASecondHolderIsRefusedWithTheFolderAndTheFirstHolder) {
  std::string dir = temp_dir();
  auto first = OutputDirLock::acquire(dir, "job-3 on node a");
  ASSERT_TRUE(first) << first.status().message();
  EXPECT_EQ(OutputDirLock::holder_of(dir), "job-3 on node a");
  auto second = OutputDirLock::acquire(dir, "job-4 on node b");
  ASSERT_FALSE(second);
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("output_dir " + dir + " is in use by job-3 on node a"),
            std::string::npos)
      << second.status().message();
  EXPECT_NE(second.status().message().find("job.output_dir"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(OutputDirLock, ReleasingTheLockFreesTheFolder) {
  std::string dir = temp_dir();
  {
    auto first = OutputDirLock::acquire(dir, "job-1");
    ASSERT_TRUE(first);
    std::optional<OutputDirLock> moved(std::move(*first));  // moving keeps it held
    EXPECT_EQ(OutputDirLock::holder_of(dir), "job-1");
  }
  EXPECT_EQ(OutputDirLock::holder_of(dir), "");
  auto again = OutputDirLock::acquire(dir, "job-2");
  ASSERT_TRUE(again) << again.status().message();
  EXPECT_EQ(OutputDirLock::holder_of(dir), "job-2");
  std::filesystem::remove_all(dir);
}

TEST(OutputDirLock, AFolderNobodyLockedHasNoHolder) {
  std::string dir = temp_dir();
  EXPECT_EQ(OutputDirLock::holder_of(dir), "");
  EXPECT_EQ(OutputDirLock::holder_of(dir + "/missing"), "");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cohort::agent
