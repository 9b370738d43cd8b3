// GPU health: an agent reporting an unhealthy GPU (its prober found an Xid
// error, ECC errors, or no answer) gets its node drained with the reason;
// the jobs there restart elsewhere without restart budget; `cohort nodes`
// says why, also after a coordinator restart; `cohort undrain` clears it.
#include <filesystem>

#include "fake_agent.h"

namespace cohort::coordinator::testing {
namespace {

using protocol::LaunchOrder;
using protocol::StopOrder;

TEST_F(CoordinatorTest, AnUnhealthyGpuDrainsItsNodeWithTheReasonAndItsJobMovesWithoutBudget) {
  start();
  FakeAgent a(endpoint_, "node-a", 2), b(endpoint_, "node-b", 2);
  auto spec = command_job("moves", 1, 2);
  spec.job.max_restarts = 0;
  std::string id = submit(spec);
  auto la = a.next_as<LaunchOrder>();
  ASSERT_TRUE(la);
  protocol::GpuReport report{"node-a", {{0, 0.5, 1 << 20, ""}, {1, 0.5, 1 << 20, "Xid 79 (GPU has fallen off the bus)"}}};
  a.send(report);
  auto stop = a.next_as<StopOrder>();
  ASSERT_TRUE(stop);
  EXPECT_NE(stop->reason.find("node node-a drained: unhealthy GPU: GPU 1: Xid 79"), std::string::npos) << stop->reason;
  auto n = node("node-a");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->drain_reason, "unhealthy GPU: GPU 1: Xid 79 (GPU has fallen off the bus)");
  a.exit_all(*la, 143, /*stopped=*/true);
  auto lb = b.next_as<LaunchOrder>();
  ASSERT_TRUE(lb);
  EXPECT_EQ(lb->job_id, id);
  EXPECT_EQ(job(id).restarts_used, 0);
  b.exit_all(*lb, 0);
  EXPECT_TRUE(wait_for_state(id, "succeeded"));
  // Healthy reports change nothing; undrain clears the reason.
  ASSERT_TRUE(client_->request<protocol::Ack>(protocol::UndrainNode{"node-a"}, 5s));
  EXPECT_TRUE(wait_until([&] { return node("node-a")->drain_reason.empty() && node("node-a")->state == "alive"; }))
      << node("node-a")->state << " / " << node("node-a")->drain_reason;
  a.send(protocol::GpuReport{"node-a", {{0, 0.1, 0, ""}}});
  std::string next = submit(command_job("healthy", 1, 2));
  auto l2 = a.next_as<LaunchOrder>();
  ASSERT_TRUE(l2);
  EXPECT_EQ(l2->job_id, next);
}

TEST_F(CoordinatorTest, TheReasonOfAHealthDrainSurvivesACoordinatorRestart) {
  char templ[] = "/tmp/cohort-state-XXXXXX";
  std::string dir = ::mkdtemp(templ);
  const std::string reason = "unhealthy GPU: GPU 0: 2 uncorrected ECC error(s) since the agent started";
  start(dir);
  {
    FakeAgent a(endpoint_, "node-a", 1);
    a.send(protocol::GpuReport{"node-a", {{0, 0, 0, "2 uncorrected ECC error(s) since the agent started"}}});
    ASSERT_TRUE(wait_until([&] { return node("node-a")->drain_reason == reason; }));
  }
  stop();
  start(dir);
  EXPECT_EQ(node("node-a")->drain_reason, reason);  // lost until it registers, and still says why
  {
    FakeAgent a(endpoint_, "node-a", 1);
    EXPECT_EQ(node("node-a")->state, "drained");
    EXPECT_EQ(node("node-a")->drain_reason, reason);
    ASSERT_TRUE(client_->request<protocol::Ack>(protocol::UndrainNode{"node-a"}, 5s));
  }
  // Undrained, the reason is gone for good: not back after another restart.
  stop();
  start(dir);
  EXPECT_EQ(node("node-a")->drain_reason, "");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cohort::coordinator::testing
