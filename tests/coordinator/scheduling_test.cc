// Scheduling keys, transition by transition: job.time_limit (SIGTERM through
// a stop order, then timed_out) and job.depends_on (waits, runs, or is
// cancelled when an entry can never hold).
#include "fake_agent.h"

namespace cohort::coordinator::testing {
namespace {

using protocol::LaunchOrder;
using protocol::StopOrder;

TEST_F(CoordinatorTest, AJobPastItsTimeLimitIsStoppedAndEndsTimedOut) {
  start();
  FakeAgent n(endpoint_, "node-1", 1);
  auto spec = command_job("limited", 1, 1);
  spec.job.time_limit_s = 60;
  spec.job.max_restarts = 3;
  std::string id = submit(spec);
  auto l = n.next_as<LaunchOrder>();
  ASSERT_TRUE(l);
  for (int s = 0; s < 58; s += 2) {  // 58 s: not yet
    clock_.advance(2s);
    beat(n, {{id, 0, 0, 100}});
  }
  EXPECT_EQ(job(id).state, "running");
  clock_.advance(2s);
  auto stop = n.next_as<StopOrder>();
  ASSERT_TRUE(stop);
  EXPECT_NE(stop->reason.find("time limit of 60 s reached"), std::string::npos) << stop->reason;
  EXPECT_EQ(job(id).state, "stopping");
  n.exit_all(*l, 0, /*stopped=*/true);  // a training worker checkpoints on SIGTERM and exits
  ASSERT_TRUE(wait_for_state(id, "timed_out"));
  auto info = job(id);
  EXPECT_EQ(info.restarts_used, 0) << "a time limit is not a failure to restart";
  EXPECT_EQ(info.attempts.size(), 1u);
  EXPECT_NE(info.message.find("job.time_limit"), std::string::npos);
}

TEST_F(CoordinatorTest, ADependentJobWaitsForItsDependencyAndRunsWhenItSucceeds) {
  start();
  FakeAgent n(endpoint_, "node-1", 2);
  std::string first = submit(command_job("first", 1, 1));
  auto l = n.next_as<LaunchOrder>();
  ASSERT_TRUE(l);
  auto then = command_job("then", 1, 1);
  then.job.depends_on = {first + ":ok"};
  std::string second = submit(then);
  std::string other = submit(command_job("other", 1, 1));  // not held back by the waiting one
  auto lo = n.next_as<LaunchOrder>();
  ASSERT_TRUE(lo);
  EXPECT_EQ(lo->job_id, other);
  EXPECT_EQ(job(second).state, "queued");
  EXPECT_EQ(job(second).message, "waiting for dependencies: " + first + ":ok (job.depends_on)");
  n.exit_all(*l, 0);
  auto ls = n.next_as<LaunchOrder>();
  ASSERT_TRUE(ls);
  EXPECT_EQ(ls->job_id, second);
}

TEST_F(CoordinatorTest, ADependencyThatCanNeverHoldCancelsTheJob) {
  start();
  FakeAgent n(endpoint_, "node-1", 1);
  std::string first = submit(command_job("first", 1, 1));
  auto l = n.next_as<LaunchOrder>();
  ASSERT_TRUE(l);
  auto on_ok = command_job("on-ok", 1, 1), on_notok = command_job("on-notok", 1, 1);
  on_ok.job.depends_on = {first};
  on_notok.job.depends_on = {first + ":notok"};
  std::string a = submit(on_ok), b = submit(on_notok);
  n.exit_all(*l, 3);
  ASSERT_TRUE(wait_for_state(a, "cancelled"));
  EXPECT_EQ(job(a).message, "dependency " + first + ":ok can never hold: " + first + " ended failed (job.depends_on)");
  auto lb = n.next_as<LaunchOrder>();
  ASSERT_TRUE(lb);
  EXPECT_EQ(lb->job_id, b);
}

TEST_F(CoordinatorTest, ADependencyOnAnUnknownJobIsRefusedAtSubmit) {
  start();
  auto spec = command_job("orphan", 1, 1);
  spec.job.depends_on = {"job-77:any"};
  auto r = client_->request<protocol::SubmitReply>(submit_of(spec), 5s);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().message(), "job.depends_on: no job job-77 (see `cohort jobs`)");
}

}  // namespace
}  // namespace cohort::coordinator::testing

namespace cohort::coordinator::testing {
namespace {

using protocol::LaunchOrder;
using protocol::StopOrder;

TEST_F(CoordinatorTest, AHigherPriorityJobPreemptsAPreemptibleOneWhichResumesWithoutBudget) {
  start();
  FakeAgent n(endpoint_, "node-1", 2);
  auto low_spec = command_job("low", 1, 2);
  low_spec.job.preemptible = true;
  low_spec.job.max_restarts = 0;
  std::string low = submit(low_spec);
  auto l0 = n.next_as<LaunchOrder>();
  ASSERT_TRUE(l0);
  auto high_spec = command_job("high", 1, 1);
  high_spec.job.priority = 10;
  std::string high = submit(high_spec);
  auto stop = n.next_as<StopOrder>();
  ASSERT_TRUE(stop);
  EXPECT_EQ(stop->job_id, low);
  EXPECT_NE(stop->reason.find("preempted by " + high), std::string::npos) << stop->reason;
  EXPECT_EQ(job(high).state, "queued");
  n.exit_all(*l0, 0, /*stopped=*/true);  // a training worker checkpoints on SIGTERM
  auto lh = n.next_as<LaunchOrder>();
  ASSERT_TRUE(lh);
  EXPECT_EQ(lh->job_id, high);
  EXPECT_EQ(job(low).state, "queued");
  n.exit_all(*lh, 0);
  auto l1 = n.next_as<LaunchOrder>();
  ASSERT_TRUE(l1);
  EXPECT_EQ(l1->job_id, low);
  EXPECT_EQ(l1->attempt, 1);
  EXPECT_EQ(l1->restart_count, 0);
  auto info = job(low);
  EXPECT_EQ(info.restarts_used, 0);
  EXPECT_EQ(info.attempts[0].state, "stopped");
  n.exit_all(*l1, 0);
  EXPECT_TRUE(wait_for_state(low, "succeeded"));
}

TEST_F(CoordinatorTest, AJobThatIsNotPreemptibleIsNeverStoppedForPriority) {
  start();
  FakeAgent n(endpoint_, "node-1", 1);
  std::string low = submit(command_job("low", 1, 1));
  auto l0 = n.next_as<LaunchOrder>();
  ASSERT_TRUE(l0);
  auto high_spec = command_job("high", 1, 1);
  high_spec.job.priority = 10;
  std::string high = submit(high_spec);
  EXPECT_FALSE(n.next_as<StopOrder>(300ms));
  EXPECT_EQ(job(low).state, "running");
  EXPECT_EQ(job(high).state, "queued");
}

}  // namespace
}  // namespace cohort::coordinator::testing
