// `cohort run DIR/job.toml` from another directory: the job's relative paths
// and its working directory are the job file's folder's; a missing script is
// refused before anything runs, at the key that names it.
#include <filesystem>

#include <gtest/gtest.h>

#include "cluster_harness.h"

namespace cohort::testing {
namespace {

namespace fs = std::filesystem;

TEST(Paths, AJobFileRunsFromAnyDirectoryWithItsScriptBesideIt) {
  Cluster scratch;  // a temporary folder; this process's directory is elsewhere
  fs::path project = fs::path(scratch.dir()) / "project";
  fs::create_directories(project);
  ASSERT_NE(fs::current_path(), project);
  write_file((project / "hello.sh").string(), "echo hello from $(pwd)\n");
  write_file((project / "job.toml").string(),
             "[job]\nname = \"hello\"\nkind = \"command\"\n[command]\nargv = [\"sh\", \"hello.sh\"]\n");
  auto r = run_cohort({"run", (project / "job.toml").string()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("[rank 0] hello from " + project.string()), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(project / "runs/hello/logs/attempt-0/rank-0.log"));

  write_file((project / "typo.toml").string(),
             "[job]\nname = \"typo\"\nkind = \"command\"\n[command]\nargv = [\"sh\", \"helo.sh\"]\n");
  auto bad = run_cohort({"run", (project / "typo.toml").string()});
  EXPECT_EQ(bad.exit_code, 2) << bad.out << bad.err;
  EXPECT_NE(bad.err.find((project / "typo.toml").string() + ":5:15: command.argv[1]: " +
                         (project / "helo.sh").string() + " does not exist"),
            std::string::npos)
      << bad.err;
  EXPECT_FALSE(fs::exists(project / "runs/typo"));
}

}  // namespace
}  // namespace cohort::testing
