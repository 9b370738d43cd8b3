// Per-client-key limits over real CURVE sockets (issue 35): a submission
// past its key's queued-jobs limit is refused naming the key and the limit;
// a job whose GPUs would take its key past the running-GPU limit waits (its
// message and an event say why) without holding back other keys' jobs; an
// elastic job starts and grows only within the limit; the owner survives a
// coordinator restart. Without CURVE the defaults hold for the local user.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fake_agent.h"
#include "protocol/security.h"

namespace cohort::coordinator::testing {
namespace {

namespace fs = std::filesystem;
using protocol::LaunchOrder;
using protocol::StopOrder;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class KeyLimitsTest : public CoordinatorTest {
 protected:
  // alice: name=alice max_gpus=2 max_queued=1; bob: name=bob, under the
  // defaults (--max-queued-per-key 2, no GPU limit).
  void SetUp() override {
    char templ[] = "/tmp/cohort-key-limits-XXXXXX";
    dir_ = ::mkdtemp(templ);
    ASSERT_TRUE(protocol::write_coordinator_keys(dir_ + "/coord"));
    ASSERT_TRUE(
        protocol::write_peer_keys(dir_ + "/agent", protocol::Role::kAgent, dir_ + "/coord"));
    for (const char* c : {"alice", "bob"}) {
      ASSERT_TRUE(
          protocol::write_peer_keys(dir_ + "/" + c, protocol::Role::kClient, dir_ + "/coord"));
    }
    settle({{"alice", "name=alice max_gpus=2 max_queued=1"}, {"bob", "name=bob  # the defaults"}});
    auto server = protocol::load_server_security(dir_ + "/coord");
    ASSERT_TRUE(server) << server.status().message();
    configure_ = [security = *server](CoordinatorOptions& o) {
      o.security = security;
      o.max_queued_per_key = 2;
    };
    auto agent = protocol::load_client_security(dir_ + "/agent", protocol::Role::kAgent);
    ASSERT_TRUE(agent) << agent.status().message();
    agent_security_ = *agent;
  }
  void TearDown() override {
    stop();
    fs::remove_all(dir_);
  }
  // Appends `words` to the line of each client's key in authorized_clients.
  void settle(const std::map<std::string, std::string>& words) {
    std::string list = dir_ + "/coord/authorized_clients";
    std::ifstream in(list);
    std::stringstream text;
    text << in.rdbuf();
    std::string out = text.str();
    for (const auto& [client, extra] : words) {
      std::ifstream pub(dir_ + "/" + client + "/client.public");
      std::string key;
      pub >> key;
      auto at = out.find(key);
      ASSERT_NE(at, std::string::npos) << client;
      out.insert(at + key.size(), " " + extra);
    }
    std::ofstream(list) << out;
  }
  std::unique_ptr<protocol::Client> client(const std::string& name) {
    auto security = protocol::load_client_security(dir_ + "/" + name, protocol::Role::kClient);
    EXPECT_TRUE(security) << security.status().message();
    auto c = protocol::Client::connect(endpoint_, *security);
    EXPECT_TRUE(c);
    return std::move(*c);
  }
  std::unique_ptr<FakeAgent> agent(const std::string& name, int gpus) {
    return std::make_unique<FakeAgent>(endpoint_, name, gpus, true, agent_security_);
  }
  static Result<protocol::SubmitReply> submit_as(protocol::Client& c, const jobs::JobSpec& spec) {
    return c.request<protocol::SubmitReply>(submit_of(spec), 5s);
  }
  std::string submitted(protocol::Client& c, const jobs::JobSpec& spec) {
    auto r = submit_as(c, spec);
    EXPECT_TRUE(r) << r.status().message();
    return r ? r->job_id : "";
  }
  protocol::JobInfo job_of(protocol::Client& c, const std::string& id) {
    auto r = c.request<protocol::JobList>(protocol::JobQuery{id, 0, {}}, 5s);
    EXPECT_TRUE(r) << r.status().message();
    return r && !r->jobs.empty() ? r->jobs.front() : protocol::JobInfo{};
  }
  std::string dir_;
  protocol::Security agent_security_;
};

TEST_F(KeyLimitsTest, ASubmissionPastItsKeysQueuedLimitIsRefusedNamingTheKeyAndTheLimit) {
  start();
  auto alice = client("alice"), bob = client("bob");
  // No nodes: every job waits in the queue.
  std::string first = submitted(*alice, command_job("a1", 1, 1));
  auto refused = submit_as(*alice, command_job("a2", 1, 1));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  const std::string& text = refused.status().message();
  EXPECT_TRUE(contains(text, "client key alice has 1 job(s) waiting in the queue; its limit is 1"))
      << text;
  EXPECT_TRUE(contains(text, "max_queued= on its line in authorized_clients")) << text;
  // Bob is under the default, and alice's queue is not his.
  submitted(*bob, command_job("b1", 1, 1));
  submitted(*bob, command_job("b2", 1, 1));
  auto third = submit_as(*bob, command_job("b3", 1, 1));
  ASSERT_FALSE(third);
  EXPECT_TRUE(contains(third.status().message(),
                       "client key bob has 2 job(s) waiting in the queue; its limit is 2 "
                       "(--max-queued-per-key)"))
      << third.status().message();
  EXPECT_EQ(job_of(*alice, first).owner, "alice");
  // Once alice's job has started, she may queue another.
  auto node = agent("node-a", 1);
  ASSERT_TRUE(node->next_as<LaunchOrder>());
  EXPECT_TRUE(submit_as(*alice, command_job("a3", 1, 1)));
}

TEST_F(KeyLimitsTest, AJobWaitsForItsKeysGpuLimitWithoutHoldingBackOtherKeys) {
  start();
  auto alice = client("alice"), bob = client("bob");
  auto a = agent("node-a", 2), b = agent("node-b", 2);
  std::string running = submitted(*alice, command_job("a-running", 1, 2));
  auto la = a->next_as<LaunchOrder>();
  ASSERT_TRUE(la);
  EXPECT_EQ(la->job_id, running);
  // Alice holds 2 of her 2 GPUs: her next job waits, though node-b is free.
  std::string waiting = submitted(*alice, command_job("a-waiting", 1, 2));
  ASSERT_TRUE(wait_until([&] { return contains(job_of(*alice, waiting).message, "GPU limit"); }));
  auto info = job_of(*alice, waiting);
  EXPECT_EQ(info.state, "queued");
  EXPECT_EQ(info.message,
            "waiting for its owner's GPU limit: client key alice's running jobs hold 2 of at most "
            "2 GPU(s) "
            "(max_gpus= on its line in authorized_clients); this job needs 2");
  EXPECT_TRUE(std::any_of(info.events.begin(), info.events.end(),
                          [](const auto& e) { return contains(e.text, "GPU limit"); }));
  // Bob's job, behind it in the queue, takes node-b.
  std::string bobs = submitted(*bob, command_job("b-job", 1, 2));
  auto lb = b->next_as<LaunchOrder>();
  ASSERT_TRUE(lb);
  EXPECT_EQ(lb->job_id, bobs);
  // Alice's first job ends: her waiting one starts on the GPUs it freed.
  a->exit_all(*la, 0);
  auto next = a->next_as<LaunchOrder>();
  ASSERT_TRUE(next);
  EXPECT_EQ(next->job_id, waiting);
}

TEST_F(KeyLimitsTest, AnElasticJobStartsWithinItsKeysGpuLimitAndDoesNotGrowPastIt) {
  start();
  auto alice = client("alice");
  auto a = agent("node-a", 2), b = agent("node-b", 2);
  auto spec = command_job("elastic", 1, 2);
  spec.job.nodes = {1, 2};
  std::string id = submitted(*alice, spec);
  std::optional<LaunchOrder> first = a->next_as<LaunchOrder>(1s);
  std::optional<LaunchOrder> second = b->next_as<LaunchOrder>(300ms);
  ASSERT_TRUE(first.has_value() != second.has_value()) << "placed on one node, not two";
  const LaunchOrder& order = first ? *first : *second;
  EXPECT_EQ(order.num_nodes, 1);
  EXPECT_EQ(order.world_size, 2);
  // The other node is free, but a scale-up would take alice past 2 GPUs.
  EXPECT_FALSE(a->next_as<StopOrder>(300ms));
  EXPECT_FALSE(b->next_as<StopOrder>(10ms));
  EXPECT_EQ(job_of(*alice, id).attempts.size(), 1u);
}

TEST_F(KeyLimitsTest, AJobLargerThanItsKeysGpuLimitIsRefusedAtSubmit) {
  start();
  auto alice = client("alice");
  auto refused = submit_as(*alice, command_job("too-big", 2, 2));
  ASSERT_FALSE(refused);
  const std::string& text = refused.status().message();
  EXPECT_TRUE(contains(text, "needs at least 4 GPU(s)")) << text;
  EXPECT_TRUE(contains(text, "client key alice may hold at most 2")) << text;
  EXPECT_TRUE(contains(text, "could never start")) << text;
}

TEST_F(KeyLimitsTest, TheOwnerAndItsLimitsSurviveACoordinatorRestart) {
  std::string state = dir_ + "/state";
  start(state);
  std::string id;
  {
    auto alice = client("alice");
    id = submitted(*alice, command_job("kept", 1, 1));
  }
  stop();
  start(state);
  auto alice = client("alice");
  EXPECT_EQ(job_of(*alice, id).owner, "alice");
  // Her job still waits, and still counts against her queue.
  auto refused = submit_as(*alice, command_job("second", 1, 1));
  ASSERT_FALSE(refused);
  EXPECT_TRUE(contains(refused.status().message(), "client key alice has 1 job(s) waiting"))
      << refused.status().message();
}

TEST_F(CoordinatorTest, WithoutKeysTheDefaultLimitsHoldForTheLocalUser) {
  configure_ = [](CoordinatorOptions& o) { o.max_gpus_per_key = 1; };
  start();
  FakeAgent a(endpoint_, "node-a", 2);
  std::string first = submit(command_job("first", 1, 1));
  auto la = a.next_as<LaunchOrder>();
  ASSERT_TRUE(la);
  std::string second = submit(command_job("second", 1, 1));
  ASSERT_TRUE(wait_until([&] { return contains(job(second).message, "GPU limit"); }));
  EXPECT_EQ(
      job(second).message,
      "waiting for its owner's GPU limit: the local user's running jobs hold 1 of at most 1 GPU(s) "
      "(--max-gpus-per-key); this job needs 1");
  EXPECT_EQ(job(first).owner, "");
  a.exit_all(*la, 0);
  auto next = a.next_as<LaunchOrder>();
  ASSERT_TRUE(next);
  EXPECT_EQ(next->job_id, second);
}

TEST_F(CoordinatorTest, WaitingForItsKeysLimitIsNotAPlacementTimeout) {
  configure_ = [](CoordinatorOptions& o) { o.max_gpus_per_key = 1; };
  start();
  FakeAgent a(endpoint_, "node-a", 1);
  std::string first = submit(command_job("first", 1, 1));
  auto la = a.next_as<LaunchOrder>();
  ASSERT_TRUE(la);
  auto spec = command_job("patient", 1, 1);
  spec.job.placement_timeout_s = 1;
  std::string second = submit(spec);
  ASSERT_TRUE(wait_until([&] { return contains(job(second).message, "GPU limit"); }));
  clock_.advance(2s);  // past its placement_timeout, all of it spent on the limit
  beat(a, {{first, 0, 0, 4242}});
  std::this_thread::sleep_for(200ms);  // ticks (every 5 ms) find it still held by the limit
  // The limit lets it go when `first` ends, but the node is drained by then:
  // now it waits for capacity, with its whole placement_timeout ahead.
  ASSERT_TRUE(client_->request<protocol::Ack>(protocol::DrainNode{"node-a", false}, 5s));
  a.exit_all(*la, 0);
  ASSERT_TRUE(wait_until([&] { return contains(job(second).message, "waiting for nodes"); }));
  EXPECT_EQ(job(second).state, "queued") << job(second).message;
  ASSERT_TRUE(client_->request<protocol::Ack>(protocol::UndrainNode{"node-a"}, 5s));
  auto next = a.next_as<LaunchOrder>();
  ASSERT_TRUE(next);
  EXPECT_EQ(next->job_id, second);
}

}  // namespace
}  // namespace cohort::coordinator::testing
