// The coordinator's pure parts: placement, the node registry and the
// rendezvous store, driven by a ManualClock.
#include <gtest/gtest.h>

#include "coordinator/node_registry.h"
#include "coordinator/placement.h"
#include "coordinator/rendezvous_store.h"

namespace cohort::coordinator {
namespace {

using namespace std::chrono_literals;

TEST(Placement, TakesAllNodesAtOnceInNameOrderWithTheLowestFreeGpus) {
  std::vector<NodeCapacity> cap = {{"node-c", {0, 1, 2, 3}}, {"node-a", {3, 1, 2}}, {"node-b", {0}}};
  auto p = place({2, 2, 2}, cap);
  ASSERT_TRUE(p);
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0].node, "node-a");
  EXPECT_EQ((*p)[0].gpu_indices, (std::vector<int>{1, 2}));
  EXPECT_EQ((*p)[1].node, "node-c");
  EXPECT_EQ((*p)[1].gpu_indices, (std::vector<int>{0, 1}));
}

TEST(Placement, AGangThatDoesNotFitGetsNothing) {
  EXPECT_FALSE(place({3, 3, 2}, {{"a", {0, 1}}, {"b", {0, 1}}, {"c", {0}}}));
  EXPECT_EQ(count_fitting_nodes({3, 3, 2}, {{"a", {0, 1}}, {"b", {0, 1}}, {"c", {0}}}), 2);
}

TEST(Placement, AnElasticJobTakesWhatFitsUpToItsMaximum) {
  std::vector<NodeCapacity> cap = {{"a", {0}}, {"b", {0}}, {"c", {0}}, {"d", {0}}};
  auto p = place({2, 3, 1}, cap);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->size(), 3u);
  auto q = place({2, 4, 1}, {{"a", {0}}, {"b", {0}}});
  ASSERT_TRUE(q);
  EXPECT_EQ(q->size(), 2u);
  EXPECT_FALSE(place({2, 4, 1}, {{"a", {0}}}));
}

TEST(NodeRegistry, ASilentNodeIsLostAfterTheTimeoutAndComesBackByRegistering) {
  ManualClock clock;
  NodeRegistry registry(clock, 3s);
  protocol::RegisterNode m;
  m.node = "n1";
  m.gpus = {{0, "GPU-0", "", "fake", 0}};
  registry.register_node(m, "peer-1");
  clock.advance(2s);
  EXPECT_TRUE(registry.expire().empty());
  EXPECT_TRUE(registry.heartbeat("n1", "peer-2"));
  EXPECT_EQ(registry.find("n1")->peer, "peer-2");
  clock.advance(2900ms);
  EXPECT_TRUE(registry.expire().empty());
  clock.advance(200ms);
  EXPECT_EQ(registry.expire(), std::vector<std::string>{"n1"});
  EXPECT_EQ(registry.find("n1")->state, NodeState::kLost);
  EXPECT_TRUE(registry.expire().empty());  // reported once
  EXPECT_FALSE(registry.heartbeat("n1", "peer-2"));  // must register again
  EXPECT_FALSE(registry.heartbeat("unknown", "peer-3"));
  registry.register_node(m, "peer-4");
  EXPECT_EQ(registry.find("n1")->state, NodeState::kAlive);
}

TEST(NodeRegistry, ANodeWhoseAgentCannotBeReachedIsLostAtOnce) {
  ManualClock clock;
  NodeRegistry registry(clock, 3s);
  protocol::RegisterNode m;
  m.node = "n1";
  registry.register_node(m, "peer-1");
  registry.mark_lost("n1");
  registry.mark_lost("unknown");  // no such node: nothing happens
  EXPECT_EQ(registry.find("n1")->state, NodeState::kLost);
  EXPECT_TRUE(registry.expire().empty());  // already lost: not reported again
  EXPECT_FALSE(registry.heartbeat("n1", "peer-1"));
  EXPECT_EQ(registry.nodes().size(), 1u);
}

class StoreTest : public ::testing::Test {
 protected:
  protocol::StoreRequest req(const std::string& op, std::vector<std::string> keys, int attempt = 0) {
    protocol::StoreRequest r;
    r.job_id = "job-1";
    r.attempt = attempt;
    r.op = op;
    r.keys = std::move(keys);
    return r;
  }
  // Runs a request; the result lands in *out once answered.
  void run(const protocol::StoreRequest& r, std::optional<Result<protocol::StoreReply>>* out) {
    store_.handle(r, [out](Result<protocol::StoreReply> reply) { *out = std::move(reply); });
  }
  ManualClock clock_;
  RendezvousStore store_{clock_, 60s};
};

TEST_F(StoreTest, ABlockedGetIsAnsweredBySet) {
  std::optional<Result<protocol::StoreReply>> got, set;
  auto get = req("get", {"k"});
  get.timeout_ms = 5000;
  run(get, &got);
  EXPECT_FALSE(got);
  auto s = req("set", {"k"});
  s.value = std::string("\0\1", 2);
  run(s, &set);
  ASSERT_TRUE(set && *set);
  ASSERT_TRUE(got && *got);
  EXPECT_EQ((*got)->value, std::string("\0\1", 2));
}

TEST_F(StoreTest, AddCountsAndWaitNeedsEveryKey) {
  std::optional<Result<protocol::StoreReply>> a, w, c;
  auto add = req("add", {"n"});
  add.delta = 2;
  run(add, &a);
  run(add, &a);
  ASSERT_TRUE(a && *a);
  EXPECT_EQ((*a)->value, "4");
  run(req("wait", {"n", "other"}), &w);
  EXPECT_FALSE(w);
  run(req("check", {"n", "other"}), &c);
  EXPECT_FALSE((*c)->found);
  std::optional<Result<protocol::StoreReply>> ignored;
  run(req("set", {"other"}), &ignored);
  ASSERT_TRUE(w && *w);
}

TEST_F(StoreTest, GetTimesOutByTheClock) {
  std::optional<Result<protocol::StoreReply>> got;
  auto get = req("get", {"never"});
  get.timeout_ms = 1000;
  run(get, &got);
  clock_.advance(999ms);
  store_.expire();
  EXPECT_FALSE(got);
  clock_.advance(2ms);
  store_.expire();
  ASSERT_TRUE(got);
  ASSERT_FALSE(*got);
  EXPECT_EQ(got->status().code(), StatusCode::kTimeout);
  EXPECT_NE(got->status().message().find("never"), std::string::npos);
}

TEST_F(StoreTest, AttemptsAreSeparateNamespacesAndDroppingOneAbortsItsWaiters) {
  std::optional<Result<protocol::StoreReply>> s, g, w;
  auto set = req("set", {"k"}, 0);
  set.value = "old";
  run(set, &s);
  auto get = req("get", {"k"}, 1);
  get.timeout_ms = 1000;
  run(get, &g);
  EXPECT_FALSE(g);  // attempt 1 does not see attempt 0's key
  store_.drop_namespace(RendezvousStore::namespace_of("job-1", 1));
  ASSERT_TRUE(g);
  EXPECT_EQ(g->status().code(), StatusCode::kAborted);
}

TEST_F(StoreTest, BadRequestsAreErrors) {
  std::optional<Result<protocol::StoreReply>> r;
  run(req("explode", {"k"}), &r);
  EXPECT_EQ(r->status().code(), StatusCode::kInvalidArgument);
  run(req("set", {}), &r);
  EXPECT_EQ(r->status().code(), StatusCode::kInvalidArgument);
  auto s = req("set", {"text"});
  s.value = "abc";
  run(s, &r);
  run(req("add", {"text"}), &r);
  EXPECT_EQ(r->status().code(), StatusCode::kInvalidArgument);
  auto nojob = req("get", {"k"});
  nojob.job_id = "";
  run(nojob, &r);
  EXPECT_EQ(r->status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cohort::coordinator

#include "coordinator/log_buffer.h"

namespace cohort::coordinator {
namespace {

TEST(LogBuffer, ReadsFilterByRankAndAttemptAndResumeBySequence) {
  LogBuffer logs(100000);
  std::vector<protocol::LogLine> lines;
  for (int i = 0; i < 10; ++i) lines.push_back({0, i / 5, i % 2, std::string("line ").append(std::to_string(i))});
  logs.append("j", lines);
  protocol::LogQuery q;
  q.job_id = "j";
  q.rank = 1;
  q.attempt = 1;
  uint64_t last = 0;
  auto got = logs.read(q, &last);
  ASSERT_EQ(got.size(), 3u);  // lines 5, 7 and 9: attempt 1, rank 1
  EXPECT_EQ(last, 10u);
  q.after_seq = last;
  EXPECT_TRUE(logs.read(q, &last).empty());
  EXPECT_EQ(logs.tail("j", 0, 0, 2), (std::vector<std::string>{"line 2", "line 4"}));
}

TEST(LogBuffer, KeepsTheNewestLinesAndCapsReplyBytes) {
  LogBuffer logs(5 * 50);  // each line costs its bytes + 48
  std::vector<protocol::LogLine> lines;
  for (int i = 0; i < 8; ++i) lines.push_back({0, 0, 0, std::string("l").append(std::to_string(i))});
  logs.append("j", lines);
  protocol::LogQuery q;
  q.job_id = "j";
  uint64_t last = 0;
  auto got = logs.read(q, &last);
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(got.front().text, "l3");
  EXPECT_EQ(got.front().seq, 4u);
  LogBuffer big(100 << 20);
  std::vector<protocol::LogLine> fat(100, {0, 0, 0, std::string(64 * 1024, 'x')});
  big.append("j", fat);
  got = big.read(q, &last);
  EXPECT_LT(got.size(), 100u);  // the rest comes with the next read
  EXPECT_EQ(last, got.back().seq);
}

// Issue 19: 60 × 5 MiB log batches took the coordinator from 141 to 383 MB,
// and one 8 MiB line broke `cohort logs` for good.
TEST(LogBuffer, IsBoundedInBytesPerJobAndInTotalAndCutsLongLines) {
  LogBuffer logs(1 << 20, 3 << 20);
  for (int job = 0; job < 5; ++job) {
    std::string id = std::string("j").append(std::to_string(job));
    for (int batch = 0; batch < 20; ++batch) {
      std::vector<protocol::LogLine> lines(16, {0, 0, 0, std::string(16 << 10, char('a' + job))});
      logs.append(id, lines);
    }
    EXPECT_LE(logs.job_bytes(id), size_t(1 << 20));
  }
  EXPECT_LE(logs.total_bytes(), size_t(3 << 20));
  logs.append("huge", {{0, 0, 0, std::string(8 << 20, 'h')}});
  protocol::LogQuery q;
  q.job_id = "huge";
  uint64_t last = 0;
  auto got = logs.read(q, &last);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_LT(got[0].text.size(), protocol::kMaxLogLineBytes + 100);
  EXPECT_NE(got[0].text.find("line cut: 8388608 bytes"), std::string::npos);
  logs.forget("huge");
  EXPECT_EQ(logs.job_bytes("huge"), 0u);
  EXPECT_LE(logs.total_bytes(), size_t(3 << 20));
}

}  // namespace
}  // namespace cohort::coordinator
