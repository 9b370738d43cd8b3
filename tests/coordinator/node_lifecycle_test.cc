// The coordinator's side of a node's life beyond registration and loss:
// MASTER_PORT chosen by rank 0's node before the others launch, drains
// (`cohort drain`, an agent leaving on SIGTERM) and their states.
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

}  // namespace
}  // namespace cohort::coordinator::testing
