// What a job query answers beyond the record: elapsed time, GPU-hours of the
// attempts, and a running train job's newest step (`cohort status JOB`).
#include <thread>

#include "fake_agent.h"

namespace cohort::coordinator::testing {
namespace {

double unix_seconds_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

class StatusReplyTest : public CoordinatorTest {
 protected:
  static jobs::JobSpec train_job(const std::string& name, int gpus) {
    return jobs::testing::train_job(name, 1, gpus);
  }
  static protocol::MetricBatch batch(const protocol::LaunchOrder& order, const std::string& node,
                                     int64_t step, double time) {
    protocol::MetricBatch b;
    b.job_id = order.job_id;
    b.attempt = order.attempt;
    b.node = node;
    b.total_steps = 200;
    b.eta_s = 90;
    b.rows.push_back({step, time, {{"loss", 2.25}, {"tokens_per_s", 5000}, {"lr", 1e-3}}});
    return b;
  }
};

TEST_F(StatusReplyTest, ARunningTrainJobCarriesItsNewestStepLossRateAndEta) {
  start();
  FakeAgent a(endpoint_, "node-a", 2);
  const std::string id = submit(train_job("progress", 2));
  auto order = a.next_as<protocol::LaunchOrder>();
  ASSERT_TRUE(order);
  EXPECT_FALSE(job(id).has_progress) << "no step reported yet";
  a.send(batch(*order, "node-a", 40, unix_seconds_now() - 10));
  protocol::JobInfo info;
  ASSERT_TRUE(wait_until([&] { return (info = job(id)).has_progress; }));
  EXPECT_EQ(info.progress.step, 40);
  EXPECT_EQ(info.progress.total_steps, 200);
  EXPECT_DOUBLE_EQ(info.progress.loss, 2.25);
  EXPECT_DOUBLE_EQ(info.progress.tokens_per_s, 5000);
  // The row is 10 s old: its ETA has run down by as much.
  EXPECT_GE(info.progress.age_ms, 10000);
  EXPECT_LT(info.progress.age_ms, 20000);
  EXPECT_NEAR(info.progress.eta_s, 80, 5);
  // The list carries it too (`cohort jobs --json`).
  auto list = client_->request<protocol::JobList>(protocol::JobQuery{}, 5s);
  ASSERT_TRUE(list && list->jobs.size() == 1);
  EXPECT_TRUE(list->jobs[0].has_progress);
  a.exit_all(*order, 0);
  ASSERT_TRUE(wait_for_state(id, "succeeded"));
  EXPECT_FALSE(job(id).has_progress) << "progress is for running jobs";
}

TEST_F(StatusReplyTest, ACommandJobReportsNoProgress) {
  start();
  FakeAgent a(endpoint_, "node-a", 1);
  const std::string id = submit(command_job("cmd", 1, 1));
  auto order = a.next_as<protocol::LaunchOrder>();
  ASSERT_TRUE(order);
  a.send(batch(*order, "node-a", 5, unix_seconds_now()));
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(job(id).has_progress);
}

TEST_F(StatusReplyTest, ElapsedTimeAndGpuHoursCoverEveryAttemptAndStopAtTheEnd) {
  start();
  auto control = command_job("usage", 1, 2);
  control.job.max_restarts = 1;
  // Submitted before any node exists, so it waits and nothing has run yet
  // (with a node registered it would be placed, and start, at once).
  const std::string id = submit(control);
  EXPECT_EQ(job(id).elapsed_ms, 0) << "nothing ran yet";
  FakeAgent a(endpoint_, "node-a", 2);
  auto first = a.next_as<protocol::LaunchOrder>();
  ASSERT_TRUE(first);
  std::this_thread::sleep_for(150ms);
  a.exit_all(*first, 3);  // fails; the restart budget starts a second attempt
  auto second = a.next_as<protocol::LaunchOrder>();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->attempt, 1);
  std::this_thread::sleep_for(150ms);
  EXPECT_GE(job(id).elapsed_ms, 300);
  a.exit_all(*second, 0);
  ASSERT_TRUE(wait_for_state(id, "succeeded"));
  const auto info = job(id);
  ASSERT_EQ(info.attempts.size(), 2u);
  double attempt_ms = 0;
  for (const auto& at : info.attempts) attempt_ms += double(at.ended_ms - at.started_ms);
  EXPECT_NEAR(info.gpu_hours, 2 * attempt_ms / 3.6e6, 1e-9) << "2 ranks × each attempt's wall time";
  EXPECT_GE(attempt_ms, 300);
  EXPECT_EQ(info.elapsed_ms, info.ended_ms - info.attempts.front().started_ms);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(job(id).elapsed_ms, info.elapsed_ms) << "a finished job's elapsed time stays";
}

}  // namespace
}  // namespace cohort::coordinator::testing
