// One job per output folder, end to end: a second `cohort run` on a folder
// another run writes is refused naming the folder and its holder (and leaves
// the first run's state alone); a second submission of a live job's file to
// a cluster is refused naming the live job.
#include <filesystem>

#include <gtest/gtest.h>

#include "cluster_harness.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string waiting_job(const std::string& dir, const std::string& marker) {
  return "[job]\nname = \"shared\"\nkind = \"command\"\noutput_dir = \"" + dir +
         "/out\"\nstop_grace = 2.0\n[command]\nargv = [\"sh\", \"-c\", \"echo ready; while [ ! -e " + marker +
         " ]; do sleep 0.05; done; echo done\"]\n";
}

TEST(OutputFolder, ASecondCohortRunOnTheSameFolderIsRefusedNamingTheHolder) {
  Cluster scratch;
  std::string marker = scratch.dir() + "/finish";
  auto job = scratch.write_job("shared", waiting_job(scratch.dir(), marker));
  auto first = Process::start({cohort_binary(), "run", job, "--cpu-slots", "1"}, scratch.dir() + "/first.log");
  ASSERT_TRUE(first);
  ASSERT_TRUE(wait_until([&] { return first->output().find("[rank 0] ready") != std::string::npos; }, 15s))
      << first->output();
  auto second = run_cohort({"run", job, "--cpu-slots", "1"}, 30s);
  EXPECT_EQ(second.exit_code, 2) << second.out << second.err;
  EXPECT_NE(second.err.find("output_dir " + scratch.dir() + "/out is in use by job-1 on node local"),
            std::string::npos)
      << second.err;
  EXPECT_EQ(second.out.find("[rank 0]"), std::string::npos) << "the second run started nothing";
  write_file(marker, "");
  EXPECT_EQ(first->wait(20s), 0) << first->output();
  EXPECT_NE(first->output().find("[rank 0] done"), std::string::npos) << first->output();
  // Once the first has ended the folder is free.
  auto third = run_cohort({"run", job, "--cpu-slots", "1"}, 30s);
  EXPECT_EQ(third.exit_code, 0) << third.out << third.err;
}

TEST(OutputFolder, ASecondSubmissionOfALiveJobIsRefusedWithItsId) {
  Cluster c;
  c.start_coordinator();
  c.add_agent("node-a", 1);
  std::string marker = c.dir() + "/finish";
  auto job = c.write_job("shared", waiting_job(c.dir(), marker));
  auto first = c.cli("submit", {job});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  std::string id = first.out.substr(0, first.out.find('\n'));
  auto second = c.cli("submit", {job});
  EXPECT_NE(second.exit_code, 0);
  EXPECT_NE(second.err.find("is in use by " + id), std::string::npos) << second.err;
  write_file(marker, "");
  EXPECT_TRUE(wait_until([&] { return c.job_state(id) == "succeeded"; }, 20s));
}

}  // namespace
}  // namespace cohort::testing
