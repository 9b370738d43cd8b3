// CoordinatorContact with a ManualClock: every state transition, the lease
// from the send time of the last answered heartbeat, the hold while the
// coordinator process is gone, and when probes are due.
#include <gtest/gtest.h>

#include "agent/coordinator_contact.h"

namespace cohort::agent {
namespace {

using namespace std::chrono_literals;

class ContactTest : public ::testing::Test {
 protected:
  // The defaults a coordinator sends: 0.5 s heartbeats, 2.5 s timeout, 5 s grace.
  void registered() {
    contact_.set_lease(500ms, 2500ms, 5000ms);
    contact_.sent(1);
    clock_.advance(10ms);
    ASSERT_TRUE(contact_.answered(1));
  }
  // One heartbeat sent now and answered `rtt` later.
  void heartbeat(uint64_t id, Clock::Duration rtt = 5ms) {
    contact_.sent(id);
    clock_.advance(rtt);
    ASSERT_TRUE(contact_.answered(id));
  }

  ManualClock clock_;
  CoordinatorContact contact_{clock_};
};

TEST_F(ContactTest, StartsConnectingAndTheRegistrationAnswerPutsItInContact) {
  EXPECT_EQ(contact_.state(), ContactState::kConnecting);
  clock_.advance(30s);  // no lease before registration: a long wait fences nothing
  EXPECT_FALSE(contact_.update());
  EXPECT_EQ(contact_.state(), ContactState::kConnecting);
  registered();
  EXPECT_EQ(contact_.state(), ContactState::kInContact);
  EXPECT_EQ(contact_.silence(), 0ms);
}

TEST_F(ContactTest, TheLeaseEndsHeartbeatTimeoutAfterTheSendTimeOfTheLastAnsweredHeartbeat) {
  registered();
  clock_.advance(500ms);
  heartbeat(2, 200ms);  // sent at t, answered at t + 0.2 s: the lease runs from t
  EXPECT_EQ(contact_.lease_left(), 2300ms);
  clock_.advance(1s);
  EXPECT_TRUE(contact_.update());  // 1 s without an answer: silent
  EXPECT_EQ(contact_.state(), ContactState::kSilent);
  clock_.advance(1290ms);
  EXPECT_FALSE(contact_.update());
  EXPECT_EQ(contact_.state(), ContactState::kSilent);
  clock_.advance(20ms);
  EXPECT_TRUE(contact_.update());
  EXPECT_EQ(contact_.state(), ContactState::kFenced);
}

TEST_F(ContactTest, AnAnswerAfterSilenceOrFencingIsContactAgainAndMeasuresTheOutage) {
  registered();
  contact_.sent(2);
  clock_.advance(1s);
  contact_.update();
  ASSERT_EQ(contact_.state(), ContactState::kSilent);
  ASSERT_TRUE(contact_.answered(2));
  EXPECT_EQ(contact_.state(), ContactState::kInContact);
  EXPECT_EQ(contact_.last_outage(), 1s);

  contact_.sent(3);
  clock_.advance(3s);
  contact_.update();
  ASSERT_EQ(contact_.state(), ContactState::kFenced);
  contact_.sent(4);
  clock_.advance(5ms);
  ASSERT_TRUE(contact_.answered(4));
  EXPECT_EQ(contact_.state(), ContactState::kInContact);
  EXPECT_EQ(contact_.last_outage(), 3005ms);
  EXPECT_EQ(contact_.lease_left(), 2495ms);
}

TEST_F(ContactTest, AnswersToUnknownOrOlderIdsRenewNothing) {
  registered();
  contact_.sent(2);
  clock_.advance(100ms);
  contact_.sent(3);
  clock_.advance(100ms);
  EXPECT_FALSE(contact_.answered(99));
  ASSERT_TRUE(contact_.answered(3));
  auto left = contact_.lease_left();
  EXPECT_FALSE(contact_.answered(2));  // dropped with 3's answer: it cannot move the lease back
  EXPECT_EQ(contact_.lease_left(), left);
}

TEST_F(ContactTest, PendingRequestsAreBoundedAndTheOldestForgotten) {
  registered();
  for (uint64_t id = 10; id < 10 + 300; ++id) contact_.sent(id);
  EXPECT_FALSE(contact_.answered(10));
  EXPECT_TRUE(contact_.answered(309));
}

TEST_F(ContactTest, AGoneCoordinatorHoldsTheLeaseForItsRecoveryGrace) {
  registered();
  clock_.advance(2s);
  contact_.coordinator_gone();  // its connection closed, or nothing listens on its port
  clock_.advance(4900ms);
  contact_.update();
  EXPECT_EQ(contact_.state(), ContactState::kSilent);
  EXPECT_EQ(contact_.lease_left(), 100ms);
  clock_.advance(200ms);
  contact_.update();
  EXPECT_EQ(contact_.state(), ContactState::kFenced);
}

TEST_F(ContactTest, WithoutALeaseSilenceNeverFences) {
  contact_.set_lease(500ms, 0ms, 0ms);  // an older coordinator: heartbeats unanswered
  contact_.sent(1);
  ASSERT_TRUE(contact_.answered(1));
  clock_.advance(1h);
  contact_.update();
  EXPECT_EQ(contact_.state(), ContactState::kSilent);
  EXPECT_EQ(contact_.lease_left(), Clock::Duration::max());
}

TEST_F(ContactTest, ProbesAreDueOnceSilentAndOftenEnoughToSeeARefusalBeforeTheLeaseEnds) {
  EXPECT_FALSE(contact_.probe_due({}));
  clock_.advance(1s);
  EXPECT_TRUE(contact_.probe_due({}));  // never registered: after 1 s, then every second
  EXPECT_FALSE(contact_.probe_due(clock_.now() - 900ms));

  contact_.set_lease(500ms, 1000ms, 2000ms);  // a tight timeout: half of it at most
  contact_.sent(1);
  ASSERT_TRUE(contact_.answered(1));
  EXPECT_EQ(contact_.silent_after(), 500ms);
  clock_.advance(400ms);
  EXPECT_FALSE(contact_.probe_due({}));
  clock_.advance(100ms);
  EXPECT_TRUE(contact_.probe_due({}));
  EXPECT_TRUE(contact_.probe_due(clock_.now() - 500ms));
  EXPECT_FALSE(contact_.probe_due(clock_.now() - 400ms));
}

}  // namespace
}  // namespace cohort::agent
