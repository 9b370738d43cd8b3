// Elastic accounting, transition by transition (job_record.h): a node loss
// is one restart whatever ranks fail because of it, the lost node is never
// in the next placement, and the root cause names the lost node rather than
// the survivor whose connection was reset. Faults come from fake agents and
// the manual clock.
#include <memory>

#include "fake_agent.h"

namespace cohort::coordinator::testing {
namespace {

using protocol::LaunchOrder;
using protocol::StopOrder;

// `nodes = "1:2"`, one GPU a node, one restart.
jobs::JobSpec elastic_job(const std::string& name) {
  auto spec = jobs::testing::command_job(name, 1, 1);
  spec.job.nodes = {1, 2};
  spec.job.max_restarts = 1;
  return spec;
}

class ElasticAccountingTest : public CoordinatorTest {
 protected:
  // Both agents placed: their launch orders (a is node rank 0, b rank 1).
  void place_on_both(FakeAgent& a, FakeAgent& b) {
    id_ = submit(elastic_job("elastic"));
    auto la = a.next_as<LaunchOrder>();
    auto lb = b.next_as<LaunchOrder>();
    ASSERT_TRUE(la && lb);
    ASSERT_EQ(la->world_size, 2);
    la_ = *la;
    lb_ = *lb;
  }
  // Rank 0 on node-a reports what a reset connection to node-b looks like.
  void survivor_fails(FakeAgent& a) {
    protocol::WorkerExit e;
    e.job_id = id_;
    e.attempt = 0;
    e.node = "node-a";
    e.rank = 0;
    e.exit_code = 1;
    e.last_lines = {"gloo: Connection reset by peer"};
    a.send(e);
  }
  // The launch of attempt 1 on node-a alone, after one restart.
  void expect_restart_on_a_alone(FakeAgent& a) {
    auto l1 = a.next_as<LaunchOrder>();
    ASSERT_TRUE(l1);
    EXPECT_EQ(l1->attempt, 1);
    EXPECT_EQ(l1->world_size, 1);
    EXPECT_EQ(l1->restart_count, 1);
    auto info = job(id_);
    ASSERT_EQ(info.attempts.size(), 2u);
    EXPECT_EQ(info.attempts[1].nodes, std::vector<std::string>{"node-a"});
    EXPECT_EQ(info.restarts_used, 1);
    a.exit_all(*l1, 0);
    EXPECT_TRUE(wait_for_state(id_, "succeeded"));
    EXPECT_EQ(job(id_).restarts_used, 1);
  }

  std::string id_;
  LaunchOrder la_, lb_;
};

TEST_F(ElasticAccountingTest, ALossNoticedAfterTheSurvivorFailedIsTheRootCauseAndOneRestart) {
  start();
  FakeAgent a(endpoint_, "node-a", 1), b(endpoint_, "node-b", 1);
  place_on_both(a, b);
  survivor_fails(a);
  ASSERT_TRUE(a.next_as<StopOrder>());
  EXPECT_TRUE(wait_for_state(id_, "stopping"));
  // node-b's agent is dead: silent, its rank never reports. The attempt
  // waits for it, and node-a keeps beating.
  for (int s = 0; s < 3; ++s) {
    clock_.advance(1s);
    beat(a);
  }
  EXPECT_EQ(job(id_).state, "stopping");
  clock_.advance(500ms);
  ASSERT_TRUE(wait_until([&] { return node("node-b")->state == "lost"; }));
  auto info = job(id_);
  ASSERT_GE(info.attempts.size(), 1u);
  EXPECT_EQ(info.attempts[0].state, "failed");
  EXPECT_EQ(info.attempts[0].root_cause.node, "node-b");
  EXPECT_EQ(info.attempts[0].root_cause.rank, 1);
  EXPECT_NE(info.attempts[0].root_cause.reason.find("node node-b lost"), std::string::npos);
  EXPECT_NE(info.attempts[0].reason.find("node node-b lost"), std::string::npos);
  bool consequence_noted = false;
  for (const auto& e : info.events) {
    consequence_noted |= e.text.find("rank 0 on node-a exited with code 1 followed from it") != std::string::npos;
  }
  EXPECT_TRUE(consequence_noted);
  expect_restart_on_a_alone(a);
}

TEST_F(ElasticAccountingTest, ALossLongAfterARankFailureDoesNotReplaceItsRootCause) {
  start();
  FakeAgent a(endpoint_, "node-a", 1), b(endpoint_, "node-b", 1);
  place_on_both(a, b);
  survivor_fails(a);
  ASSERT_TRUE(a.next_as<StopOrder>());
  ASSERT_TRUE(b.next_as<StopOrder>());
  // node-b's rank takes long to stop (its agent still lists it), past the
  // consequence window (3 s + 2 × 0.5 s here); then node-b goes silent.
  for (int s = 0; s < 5; ++s) {
    clock_.advance(1s);
    beat(a);
    beat(b, {{id_, 0, 1, 4242}});
  }
  for (int s = 0; s < 4; ++s) {
    clock_.advance(1s);
    beat(a);
  }
  ASSERT_TRUE(wait_until([&] { return node("node-b")->state == "lost"; }));
  auto info = job(id_);
  EXPECT_EQ(info.attempts[0].root_cause.node, "node-a");
  EXPECT_EQ(info.attempts[0].root_cause.reason, "exited with code 1");
  expect_restart_on_a_alone(a);
}

TEST_F(ElasticAccountingTest, ANodeWhoseStopOrderCannotBeDeliveredIsLostAtOnceAndNotPlacedAgain) {
  start();
  FakeAgent a(endpoint_, "node-a", 1);
  auto b = std::make_unique<FakeAgent>(endpoint_, "node-b", 1);
  place_on_both(a, *b);
  b.reset();  // kill -9 of node-b's agent: its connection closes
  std::this_thread::sleep_for(300ms);  // the coordinator sees the connection go
  survivor_fails(a);
  ASSERT_TRUE(a.next_as<StopOrder>());
  // No heartbeat timeout has passed on the manual clock: the undeliverable
  // stop order is what lost node-b.
  ASSERT_TRUE(wait_until([&] { return node("node-b")->state == "lost"; }));
  auto info = job(id_);
  EXPECT_EQ(info.attempts[0].root_cause.node, "node-b");
  EXPECT_NE(info.attempts[0].root_cause.reason.find("cannot be reached"), std::string::npos)
      << info.attempts[0].root_cause.reason;
  a.exit_all(la_, 143, /*stopped=*/true);
  expect_restart_on_a_alone(a);
}

TEST_F(ElasticAccountingTest, ALaunchOrderThatCannotBeDeliveredUsesNoRestartBudget) {
  start();
  FakeAgent a(endpoint_, "node-a", 1);
  {
    FakeAgent b(endpoint_, "node-b", 1);
  }  // node-b's agent is gone, but not yet noticed: still alive to the registry
  std::this_thread::sleep_for(300ms);
  id_ = submit(elastic_job("elastic"));
  auto l0 = a.next_as<LaunchOrder>();
  ASSERT_TRUE(l0);
  EXPECT_EQ(l0->world_size, 2);
  // node-a reported MASTER_PORT; node-b's held order cannot be delivered.
  ASSERT_TRUE(a.next_as<StopOrder>());
  EXPECT_TRUE(wait_until([&] { return node("node-b")->state == "lost"; }));
  a.exit_all(*l0, 143, /*stopped=*/true);
  auto l1 = a.next_as<LaunchOrder>();
  ASSERT_TRUE(l1);
  EXPECT_EQ(l1->world_size, 1);
  EXPECT_EQ(l1->restart_count, 0);
  auto info = job(id_);
  EXPECT_EQ(info.restarts_used, 0);
  EXPECT_EQ(info.attempts[0].state, "stopped");
  EXPECT_NE(info.attempts[0].reason.find("could not be delivered"), std::string::npos);
  a.exit_all(*l1, 0);
  EXPECT_TRUE(wait_for_state(id_, "succeeded"));
}

TEST_F(ElasticAccountingTest, FailuresAfterALossAreConsequencesAndCostNothingMore) {
  start();
  FakeAgent a(endpoint_, "node-a", 1), b(endpoint_, "node-b", 1);
  place_on_both(a, b);
  clock_.advance(2s);
  beat(a, {{id_, 0, 0, 100}});
  clock_.advance(1500ms);  // node-b silent for 3.5 s: lost first
  ASSERT_TRUE(wait_until([&] { return node("node-b")->state == "lost"; }));
  ASSERT_TRUE(a.next_as<StopOrder>());
  survivor_fails(a);  // the reset connection, after the loss
  auto info = job(id_);
  EXPECT_EQ(info.attempts[0].root_cause.node, "node-b");
  expect_restart_on_a_alone(a);
}

// Elastic batch through the coordinator (elastic_batch.h): the job shrinks
// from 2 nodes to 1 and keeps 16 sequences a step; the change is an event.
TEST_F(ElasticAccountingTest, AShrunkTrainingJobKeepsItsGlobalBatchAndSaysSo) {
  start();
  FakeAgent a(endpoint_, "node-a", 1), b(endpoint_, "node-b", 1);
  auto spec = jobs::testing::train_job("shrink", 1, 1);
  spec.job.nodes = {1, 2};
  spec.job.max_restarts = 1;
  spec.train.micro_batch = 8;
  id_ = submit(spec);
  auto la = a.next_as<LaunchOrder>();
  ASSERT_TRUE(la && b.next_as<LaunchOrder>());
  EXPECT_EQ(jobs::testing::loaded_spec(la->job_toml).train.global_batch, 16);
  clock_.advance(2s);
  beat(a, {{id_, 0, 0, 100}});
  clock_.advance(1500ms);  // node-b lost
  ASSERT_TRUE(a.next_as<StopOrder>());
  a.exit_all(*la, 143, true);
  auto l1 = a.next_as<LaunchOrder>();
  ASSERT_TRUE(l1);
  EXPECT_EQ(l1->world_size, 1);
  EXPECT_EQ(jobs::testing::loaded_spec(l1->job_toml).train.global_batch, 16);
  bool logged = false;
  for (const auto& e : job(id_).events) {
    logged |= e.text == "attempt 1: global batch 16 kept at 1 node(s): gradient accumulation 2 (micro_batch 8 × "
                        "data-parallel 1)";
  }
  EXPECT_TRUE(logged);
}

}  // namespace
}  // namespace cohort::coordinator::testing
