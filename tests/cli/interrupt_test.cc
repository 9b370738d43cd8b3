// Ctrl-C during `cohort submit --wait` and `cohort run`: submit detaches (the
// job runs on) unless --cancel-on-interrupt, run stops the job cleanly; both
// exit 130 (128 + SIGINT), as shells expect.
#include <signal.h>

#include <gtest/gtest.h>

#include "cli_test_util.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

TEST(CliInterrupt, CtrlCDuringSubmitWaitDetachesAndTheJobRunsOn) {
  Cluster c;
  c.start_coordinator();
  c.add_agent("node-a", 1);
  ASSERT_TRUE(c.wait_for_alive_nodes(1, 10s));
  auto job = c.write_job("long", command_job(c, "long", 1, "echo started; exec sleep 60"));
  auto p = Process::start({cohort_binary(), "submit", job, "--wait", "--coordinator", c.endpoint()},
                          c.dir() + "/submit.out");
  ASSERT_TRUE(p);
  ASSERT_TRUE(
      wait_until([&] { return p->output().find("[rank 0] started") != std::string::npos; }, 20s))
      << p->output();
  const std::string id = p->output().substr(0, p->output().find('\n'));
  p->signal(SIGINT);
  EXPECT_EQ(p->wait(30s), 130) << p->output();
  EXPECT_NE(p->output().find("detached from job " + id + " (running); it keeps running. Follow it with `cohort logs " +
                             id + " --follow`"),
            std::string::npos)
      << p->output();
  EXPECT_EQ(c.job_state(id), "running");
  EXPECT_EQ(c.cli("cancel", {id}).exit_code, 0);
}

TEST(CliInterrupt, CtrlCDuringSubmitWaitWithCancelOnInterruptCancelsTheJobAndExits130) {
  Cluster c;
  c.start_coordinator();
  c.add_agent("node-a", 1);
  ASSERT_TRUE(c.wait_for_alive_nodes(1, 10s));
  auto job = c.write_job("long", command_job(c, "long", 1, "echo started; exec sleep 60"));
  auto p = Process::start(
      {cohort_binary(), "submit", job, "--wait", "--cancel-on-interrupt", "--coordinator", c.endpoint()},
      c.dir() + "/submit.out");
  ASSERT_TRUE(p);
  ASSERT_TRUE(
      wait_until([&] { return p->output().find("[rank 0] started") != std::string::npos; }, 20s))
      << p->output();
  const std::string id = p->output().substr(0, p->output().find('\n'));
  p->signal(SIGINT);
  EXPECT_EQ(p->wait(30s), 130) << p->output();
  EXPECT_NE(p->output().find("stopping job " + id), std::string::npos) << p->output();
  EXPECT_EQ(c.job_state(id), "cancelled");
}

TEST(CliInterrupt, CtrlCDuringRunStopsTheWorkersAndExits130) {
  Cluster c;
  auto job = c.write_job("long", command_job(c, "long", 1, "echo started; exec sleep 60"));
  auto p = Process::start({cohort_binary(), "run", job, "--cpu-slots", "1"}, c.dir() + "/run.out");
  ASSERT_TRUE(p);
  ASSERT_TRUE(
      wait_until([&] { return p->output().find("[rank 0] started") != std::string::npos; }, 20s))
      << p->output();
  p->signal(SIGINT);
  EXPECT_EQ(p->wait(30s), 130) << p->output();
  EXPECT_NE(p->output().find("job long cancelled"), std::string::npos) << p->output();
}

}  // namespace
}  // namespace cohort::testing
