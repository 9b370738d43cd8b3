// The coordinator's half of the agents' fencing lease: it answers every
// heartbeat it takes (and only those), tells agents its heartbeat_timeout and
// recovery_grace, and notes in a job's events the ranks an agent stopped on
// its own while cut off.
#include "fake_agent.h"

namespace cohort::coordinator::testing {
namespace {

TEST_F(CoordinatorTest, TheRegistrationAnswerCarriesTheLeaseTerms) {
  configure_ = [](CoordinatorOptions& o) { o.recovery_grace = 7s; };
  start();
  FakeAgent a(endpoint_, "n1", 1, false);
  a.send(protocol::RegisterNode{"n1", "10.0.0.1", {{0, "u", "", "fake", 0}}, {}}, 41);
  auto e = a.next(protocol::RegisterAck::kType);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->id, 41u);
  auto ack = protocol::body_as<protocol::RegisterAck>(*e);
  ASSERT_TRUE(ack);
  EXPECT_EQ(ack->heartbeat_timeout_ms, 3000);
  EXPECT_EQ(ack->recovery_grace_ms, 7000);
}

TEST_F(CoordinatorTest, HeartbeatsTakenAreAnsweredWithTheirIdAndALostNodesAreNot) {
  start();
  FakeAgent a(endpoint_, "n1", 1);
  a.send(protocol::Heartbeat{"n1", {}}, 77);
  auto e = a.next(protocol::Ack::kType);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->id, 77u);
  clock_.advance(4s);  // past the 3 s timeout: lost
  ASSERT_TRUE(wait_until([&] {
    auto n = node("n1");
    return n && n->state == "lost";
  }));
  a.send(protocol::Heartbeat{"n1", {}}, 78);
  auto refused = a.next(protocol::ErrorReply::kType);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->id, 78u);  // "unknown_node": register again; no lease renewal
  EXPECT_FALSE(a.next(protocol::Ack::kType, 200ms));
}

TEST_F(CoordinatorTest, RanksAnAgentStoppedWhileCutOffAreNotedInTheJobsEvents) {
  start();
  FakeAgent a(endpoint_, "n1", 2);
  std::string id = submit(command_job("fenced", 1, 2));
  auto order = a.next_as<protocol::LaunchOrder>();
  ASSERT_TRUE(order);
  protocol::RegisterNode again{
      "n1", "10.0.0.1", {{0, "u0", "", "fake", 0}, {1, "u1", "", "fake", 0}}, {}};
  again.fenced = {{id, order->attempt, 0, 500}, {id, order->attempt, 1, 501}};
  again.fence_reason = "no answer from the coordinator for 3.0 s (self-fencing)";
  a.send(again, 9);
  ASSERT_TRUE(a.next(protocol::RegisterAck::kType));
  bool noted = false;
  for (const auto& ev : job(id).events) {
    noted = noted || ev.text.find(
                         "node n1 stopped rank(s) 0, 1 of attempt 0 itself: no answer from the "
                         "coordinator for 3.0 s (self-fencing)") != std::string::npos;
  }
  EXPECT_TRUE(noted);
}

TEST_F(CoordinatorTest, AnOversizedFenceReportIsRefused) {
  start();
  FakeAgent a(endpoint_, "n1", 1, false);
  protocol::RegisterNode m{"n1", "10.0.0.1", {{0, "u", "", "fake", 0}}, {}};
  m.fence_reason = std::string(5000, 'x');
  a.send(m, 3);
  auto e = a.next(protocol::ErrorReply::kType);
  ASSERT_TRUE(e);
  auto err = protocol::body_as<protocol::ErrorReply>(*e);
  ASSERT_TRUE(err);
  EXPECT_NE(err->message.find("fence_reason"), std::string::npos) << err->message;
}

}  // namespace
}  // namespace cohort::coordinator::testing
