// job_control_from_toml: what the coordinator and the agent read from the
// resolved job file a client sends, and every way that file can be refused.
#include "protocol/job_control.h"

#include <gtest/gtest.h>

#include "jobs/load.h"
#include "protocol/limits.h"
#include "tests/jobs/job_files.h"

namespace cohort::protocol {
namespace {

TEST(JobControl, ReadsEveryControlFieldOfTheResolvedFile) {
  jobs::JobSpec spec = jobs::testing::command_job("ctl", 2, 4);
  spec.job.nodes = {2, 5};
  spec.job.max_restarts = 3;
  spec.job.priority = -7;
  spec.job.stop_grace_s = 2.5;
  spec.job.hang_timeout_s = 30;
  spec.job.placement_timeout_s = 60;
  spec.job.port_range = "29500-29599";
  spec.job.env = {{"A", "1"}, {"B", "two words"}};
  spec.command.argv = {"python3", "train.py", "--lr", "3e-4"};
  auto c = job_control_from_toml(jobs::to_toml(spec));
  ASSERT_TRUE(c) << c.status().message();
  EXPECT_EQ(c->name, "ctl");
  EXPECT_EQ(c->kind, jobs::JobKind::kCommand);
  EXPECT_EQ(c->nodes_min, 2);
  EXPECT_EQ(c->nodes_max, 5);
  EXPECT_EQ(c->gpus_per_node, 4);
  EXPECT_EQ(c->max_restarts, 3);
  EXPECT_EQ(c->priority, -7);
  EXPECT_EQ(c->output_dir, "/tmp/ctl");
  EXPECT_EQ(c->working_dir, "/tmp");
  EXPECT_EQ(c->devices, jobs::DeviceVisibility::kNode);  // a command job's default
  EXPECT_EQ(c->stop_grace_s, 2.5);
  EXPECT_EQ(c->hang_timeout_s, 30);
  EXPECT_EQ(c->placement_timeout_s, 60);
  EXPECT_EQ(c->port_range, "29500-29599");
  EXPECT_EQ(c->env, spec.job.env);
  EXPECT_EQ(c->argv, spec.command.argv);
}

TEST(JobControl, KindAndDevicesAreTheJobFilesWordsAndNothingElse) {
  jobs::JobSpec train = jobs::testing::train_job("t", 1, 2);
  auto c = job_control_from_toml(jobs::to_toml(train));
  ASSERT_TRUE(c) << c.status().message();
  EXPECT_EQ(c->kind, jobs::JobKind::kTrain);
  EXPECT_EQ(c->devices, jobs::DeviceVisibility::kOwn);  // a built-in worker's default
  EXPECT_TRUE(c->argv.empty());
  struct Bad {
    const char* line;
    const char* named;
  };
  for (const Bad& b :
       {Bad{"kind = \"sweep\"", "sweep"}, Bad{"kind = \"command\"\ndevices = \"all\"", "all"}}) {
    auto bad = job_control_from_toml("[job]\nname = \"x\"\n" + std::string(b.line) +
                                     "\n[command]\nargv = [\"true\"]\n");
    ASSERT_FALSE(bad) << b.line;
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find(b.named), std::string::npos) << bad.status().message();
  }
}

TEST(JobControl, AnEmptyOrOversizedFileIsRefusedBeforeItIsParsed) {
  auto empty = job_control_from_toml("");
  ASSERT_FALSE(empty);
  EXPECT_NE(empty.status().message().find("no job file"), std::string::npos)
      << empty.status().message();
  auto huge = job_control_from_toml(std::string(kMaxJobTomlBytes + 1, '#'));
  ASSERT_FALSE(huge);
  EXPECT_NE(huge.status().message().find("at most " + std::to_string(kMaxJobTomlBytes)),
            std::string::npos)
      << huge.status().message();
}

TEST(JobControl, ARefusalQuotesAFewLoadErrorsWithTheirPositions) {
  std::string text = "[job]\nname = \"x\"\nkind = \"command\"\n[command]\nargv = [\"true\"]\n";
  for (int i = 0; i < 50; ++i) text += "[extra" + std::to_string(i) + "]\n";
  auto bad = job_control_from_toml(text);
  ASSERT_FALSE(bad);
  const std::string& m = bad.status().message();
  EXPECT_NE(m.find("job.resolved.toml:6:"), std::string::npos) << m;
  EXPECT_NE(m.find("(and 47 more)"), std::string::npos) << m;
  EXPECT_LT(m.size(), 2048u);
  auto broken = job_control_from_toml("[job\nname = ");
  ASSERT_FALSE(broken);
  EXPECT_NE(broken.status().message().find("job.resolved.toml:1:"), std::string::npos)
      << broken.status().message();
}

TEST(JobControl, NothingOfTheReadersDirectoryEntersTheJob) {
  // A resolved file names absolute paths; one that does not still never
  // resolves against the daemon's working directory.
  auto c = job_control_from_toml(
      "[job]\nname = \"rel\"\nkind = \"command\"\noutput_dir = \"out\"\n[command]\nargv = "
      "[\"true\"]\n");
  ASSERT_TRUE(c) << c.status().message();
  EXPECT_EQ(c->output_dir, "/out");
  EXPECT_EQ(c->working_dir, "/");
}

}  // namespace
}  // namespace cohort::protocol
