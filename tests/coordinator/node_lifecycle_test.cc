// The coordinator's side of a node's life beyond registration and loss:
// MASTER_PORT chosen by rank 0's node before the others launch, drains
// (`cohort drain`, an agent leaving on SIGTERM) and their states.
#include <filesystem>

#include "fake_agent.h"

namespace cohort::coordinator::testing {
namespace {

using protocol::LaunchOrder;
using protocol::StopOrder;
using protocol::WorkersStarted;

TEST_F(CoordinatorTest, OtherNodesLaunchOnlyOnceRankZerosNodeHasPickedMasterPort) {
  start();
  FakeAgent a(endpoint_, "node-a", 1), b(endpoint_, "node-b", 1);
  a.master_port_to_report = 0;  // a reports by hand below
  std::string id = submit(command_job("ports", 2, 1));
  auto la = a.next_as<LaunchOrder>();
  ASSERT_TRUE(la);
  EXPECT_EQ(la->master_port, 0);
  EXPECT_FALSE(b.next_as<LaunchOrder>(300ms)) << "node-b launched before MASTER_PORT was known";
  // Only rank 0's node may name the port.
  b.send(WorkersStarted{id, 0, "node-a", 31001});
  b.send(WorkersStarted{id, 0, "node-b", 31001});
  EXPECT_FALSE(b.next_as<LaunchOrder>(300ms));
  a.send(WorkersStarted{id, 0, "node-a", 31002});
  auto lb = b.next_as<LaunchOrder>();
  ASSERT_TRUE(lb);
  EXPECT_EQ(lb->master_port, 31002);
  EXPECT_EQ(lb->node_rank, 1);
  // A second report changes nothing.
  a.send(WorkersStarted{id, 0, "node-a", 31003});
  EXPECT_FALSE(b.next_as<LaunchOrder>(200ms));
  a.exit_all(*la, 0);
  b.exit_all(*lb, 0);
  EXPECT_TRUE(wait_for_state(id, "succeeded"));
}

TEST_F(CoordinatorTest, ARankZeroFailureBeforeThePortIsPickedNeverLaunchesTheOthers) {
  start();
  FakeAgent a(endpoint_, "node-a", 2), b(endpoint_, "node-b", 2);
  a.master_port_to_report = 0;
  std::string id = submit(command_job("early-fail", 2, 2));
  auto la = a.next_as<LaunchOrder>();
  ASSERT_TRUE(la);
  a.exit_rank(*la, 0, 1);
  ASSERT_TRUE(a.next_as<StopOrder>());
  a.exit_rank(*la, 1, 143, /*stopped=*/true);
  // node-b's ranks never ran: they do not hold the attempt open.
  EXPECT_TRUE(wait_for_state(id, "failed"));
  EXPECT_FALSE(b.next_as<LaunchOrder>(200ms));
  auto info = job(id);
  EXPECT_EQ(info.root_cause.rank, 0);
  EXPECT_EQ(info.root_cause.node, "node-a");
}

class DrainTest : public CoordinatorTest {
 protected:
  std::string drain(const std::string& node, bool stop_running) {
    auto r = client_->request<protocol::Ack>(protocol::DrainNode{node, stop_running}, 5s);
    EXPECT_TRUE(r) << r.status().message();
    return r ? r->text : "";
  }
  std::string undrain(const std::string& node) {
    auto r = client_->request<protocol::Ack>(protocol::UndrainNode{node}, 5s);
    EXPECT_TRUE(r) << r.status().message();
    return r ? r->text : "";
  }
  static jobs::JobSpec elastic_job(const std::string& name) {
    auto spec = command_job(name, 1, 1);
    spec.job.nodes.max = 2;
    spec.job.max_restarts = 0;  // a drain must not need any
    return spec;
  }
};

TEST_F(DrainTest, ADrainedNodeTakesNoNewWorkUntilUndrained) {
  start();
  FakeAgent a(endpoint_, "node-a", 1);
  EXPECT_NE(drain("node-a", false).find("node node-a drained: no new work there"), std::string::npos);
  EXPECT_EQ(node("node-a")->state, "drained");
  std::string id = submit(command_job("waits", 1, 1));
  EXPECT_FALSE(a.next_as<LaunchOrder>(300ms));
  EXPECT_EQ(job(id).state, "queued");
  EXPECT_NE(job(id).message.find("waiting for nodes"), std::string::npos) << job(id).message;
  // Still a live node: its heartbeats count, it is not lost.
  clock_.advance(2s);
  a.heartbeat();
  EXPECT_TRUE(wait_until([&] { return node("node-a")->heartbeat_age_ms == 0; }));
  clock_.advance(2s);
  EXPECT_EQ(node("node-a")->state, "drained");
  EXPECT_NE(undrain("node-a").find("takes new work again"), std::string::npos);
  EXPECT_EQ(node("node-a")->state, "alive");
  auto l = a.next_as<LaunchOrder>();
  ASSERT_TRUE(l);
  EXPECT_EQ(l->job_id, id);
  auto unknown = client_->request<protocol::Ack>(protocol::DrainNode{"node-z", false}, 5s);
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.status().message().find("no node 'node-z'"), std::string::npos);
}

TEST_F(DrainTest, StopRunningShrinksAnElasticJobOffTheNodeWithoutRestartBudget) {
  start();
  FakeAgent a(endpoint_, "node-a", 1), b(endpoint_, "node-b", 1);
  std::string id = submit(elastic_job("shrink"));
  auto la = a.next_as<LaunchOrder>();
  auto lb = b.next_as<LaunchOrder>();
  ASSERT_TRUE(la && lb);
  EXPECT_NE(drain("node-b", true).find("stopping 1 job(s) there"), std::string::npos);
  EXPECT_EQ(node("node-b")->state, "draining");
  ASSERT_TRUE(a.next_as<StopOrder>() && b.next_as<StopOrder>());
  a.exit_all(*la, 143, true);
  b.exit_all(*lb, 143, true);
  auto la1 = a.next_as<LaunchOrder>();
  ASSERT_TRUE(la1);
  EXPECT_EQ(la1->world_size, 1);
  EXPECT_EQ(la1->restart_count, 0);
  EXPECT_FALSE(b.next_as<LaunchOrder>(200ms));
  auto info = job(id);
  EXPECT_EQ(info.state, "running");
  EXPECT_EQ(info.restarts_used, 0);
  ASSERT_EQ(info.attempts.size(), 2u);
  EXPECT_EQ(info.attempts[0].state, "stopped");
  EXPECT_FALSE(info.attempts[0].has_root_cause);
  EXPECT_FALSE(info.attempts[0].counts_as_restart && info.attempts[1].counts_as_restart);
  EXPECT_NE(info.attempts[0].reason.find("node node-b drained"), std::string::npos) << info.attempts[0].reason;
  EXPECT_EQ(node("node-b")->state, "drained");
  // Undrained, the node grows the job back (a scale-up, free as well).
  undrain("node-b");
  ASSERT_TRUE(a.next_as<StopOrder>());
  a.exit_all(*la1, 143, true);
  auto la2 = a.next_as<LaunchOrder>();
  auto lb2 = b.next_as<LaunchOrder>();
  ASSERT_TRUE(la2 && lb2);
  EXPECT_EQ(lb2->world_size, 2);
  EXPECT_EQ(job(id).restarts_used, 0);
}

TEST_F(DrainTest, WithoutStopRunningTheWorkThereFinishes) {
  start();
  FakeAgent a(endpoint_, "node-a", 1);
  std::string id = submit(command_job("finishes", 1, 1));
  auto l = a.next_as<LaunchOrder>();
  ASSERT_TRUE(l);
  EXPECT_NE(drain("node-a", false).find(id + " finish(es) there first"), std::string::npos);
  EXPECT_FALSE(a.next_as<StopOrder>(200ms));
  EXPECT_EQ(node("node-a")->state, "draining");
  a.exit_all(*l, 0);
  EXPECT_TRUE(wait_for_state(id, "succeeded"));
  EXPECT_EQ(node("node-a")->state, "drained");
}

TEST_F(DrainTest, AnAgentLeavingDrainsItsNodeThenLeavesWithoutAFailure) {
  start();
  FakeAgent a(endpoint_, "node-a", 1), b(endpoint_, "node-b", 1);
  std::string id = submit(elastic_job("leaver"));
  auto la = a.next_as<LaunchOrder>();
  auto lb = b.next_as<LaunchOrder>();
  ASSERT_TRUE(la && lb);
  // What an agent does on SIGTERM: say so, stop its workers, say it left.
  b.send(protocol::NodeLeaving{"node-b", "its agent is shutting down"});
  ASSERT_TRUE(a.next_as<StopOrder>() && b.next_as<StopOrder>());
  EXPECT_EQ(node("node-b")->state, "draining");
  b.exit_all(*lb, 143, true);
  a.exit_all(*la, 143, true);
  auto la1 = a.next_as<LaunchOrder>();
  ASSERT_TRUE(la1);
  EXPECT_EQ(la1->world_size, 1);
  b.send(protocol::NodeLeft{"node-b"});
  EXPECT_TRUE(wait_until([&] { return node("node-b")->state == "left"; }));
  // Left is not lost: silence afterwards changes nothing, and the job never
  // names the node as a root cause. node-b stays silent for 5 s, past the
  // 3 s timeout; node-a beats each second, so that no check can find its
  // last heartbeat older than the timeout (one 5 s step raced the check
  // against node-a's heartbeat under load).
  for (int second = 0; second < 5; ++second) {
    clock_.advance(1s);
    beat(a, {{id, 1, 0, 100}});
  }
  EXPECT_EQ(node("node-b")->state, "left");
  auto info = job(id);
  EXPECT_EQ(info.restarts_used, 0);
  EXPECT_FALSE(info.has_root_cause);
  EXPECT_FALSE(info.attempts[0].has_root_cause);
  EXPECT_NE(info.attempts[0].reason.find("node node-b is leaving"), std::string::npos) << info.attempts[0].reason;
  // Another connection cannot say node-a leaves.
  b.send(protocol::NodeLeaving{"node-a", "spoofed"});
  EXPECT_FALSE(a.next_as<StopOrder>(200ms));
  EXPECT_EQ(node("node-a")->state, "alive");
  // A left node can be forgotten; an agent that comes back is alive again.
  auto rm = client_->request<protocol::Ack>(protocol::RemoveNode{"node-b"}, 5s);
  EXPECT_TRUE(rm) << rm.status().message();
}

TEST_F(DrainTest, ADrainAndALeaveSurviveACoordinatorRestart) {
  char templ[] = "/tmp/cohort-state-XXXXXX";
  std::string dir = ::mkdtemp(templ);
  start(dir);
  {
    FakeAgent a(endpoint_, "node-a", 1), b(endpoint_, "node-b", 1);
    drain("node-a", false);
    b.send(protocol::NodeLeaving{"node-b", "its agent is shutting down"});
    b.send(protocol::NodeLeft{"node-b"});
    ASSERT_TRUE(wait_until([&] { return node("node-b")->state == "left"; }));
  }
  stop();
  start(dir);
  EXPECT_EQ(node("node-b")->state, "left");
  EXPECT_EQ(node("node-a")->state, "lost");  // until its agent registers again
  FakeAgent a(endpoint_, "node-a", 1);
  EXPECT_EQ(node("node-a")->state, "drained");  // still drained: no new work
  std::string id = submit(command_job("after-restart", 1, 1));
  EXPECT_FALSE(a.next_as<LaunchOrder>(300ms));
  undrain("node-a");
  EXPECT_TRUE(a.next_as<LaunchOrder>());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cohort::coordinator::testing
