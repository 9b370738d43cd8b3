// The coordinator over real sockets with fake agents: scheduling, attempts,
// failures, restarts, node loss (by ManualClock), cancel, and robustness.
#include <random>

#include "fake_agent.h"

namespace cohort::coordinator::testing {
namespace {

using protocol::LaunchOrder;
using protocol::StopOrder;

TEST_F(CoordinatorTest, GangPlacementUsesNameOrderAndOneMaster) {
  start();
  FakeAgent b(endpoint_, "node-b", 2), a(endpoint_, "node-a", 2);
  std::string id = submit(command_job("gang", 2, 2));
  auto la = a.next_as<LaunchOrder>();
  auto lb = b.next_as<LaunchOrder>();
  ASSERT_TRUE(la && lb);
  EXPECT_EQ(la->node_rank, 0);
  EXPECT_EQ(lb->node_rank, 1);
  EXPECT_EQ(la->world_size, 4);
  EXPECT_EQ(la->gpu_indices, (std::vector<int>{0, 1}));
  EXPECT_EQ(la->master_addr, "10.0.0.a");
  EXPECT_EQ(lb->master_addr, "10.0.0.a");
  // Rank 0's node picks MASTER_PORT; the others learn it in their orders.
  EXPECT_EQ(la->master_port, 0);
  EXPECT_EQ(lb->master_port, a.master_port_to_report);
  EXPECT_EQ(job(id).state, "running");
  a.exit_all(*la, 0);
  b.exit_all(*lb, 0);
  EXPECT_TRUE(wait_for_state(id, "succeeded"));
}

TEST_F(CoordinatorTest, QueueIsFifoWithinPriority) {
  start();
  FakeAgent n(endpoint_, "node-1", 4);
  std::string x = submit(command_job("x", 1, 4));
  auto lx = n.next_as<LaunchOrder>();
  ASSERT_TRUE(lx);
  auto low1 = command_job("low1", 1, 4), low2 = command_job("low2", 1, 4), high = command_job("high", 1, 4);
  high.job.priority = 5;
  std::string l1 = submit(low1), l2 = submit(low2), h = submit(high);
  EXPECT_EQ(job(l1).state, "queued");
  std::vector<std::string> order;
  n.exit_all(*lx, 0);
  for (int i = 0; i < 3; ++i) {
    auto l = n.next_as<LaunchOrder>();
    ASSERT_TRUE(l);
    order.push_back(l->job_id);
    n.exit_all(*l, 0);
  }
  EXPECT_EQ(order, (std::vector<std::string>{h, l1, l2}));
}

TEST_F(CoordinatorTest, AJobTheClusterCannotHoldEvenEmptyHoldsBackNobody) {
  start();
  FakeAgent n(endpoint_, "node-1", 2);
  std::string huge = submit(command_job("huge", 1, 4));  // 4 GPUs on a 2-GPU node
  std::string small = submit(command_job("small", 1, 1));
  auto l = n.next_as<LaunchOrder>();
  ASSERT_TRUE(l);
  EXPECT_EQ(l->job_id, small);
  EXPECT_EQ(job(huge).state, "queued");
  EXPECT_NE(job(huge).message.find("waiting for nodes"), std::string::npos) << job(huge).message;
  // A job that merely waits for busy GPUs does hold back the ones behind it.
  std::string both = submit(command_job("both", 1, 2));
  std::string tail = submit(command_job("tail", 1, 1));
  EXPECT_EQ(job(both).message.substr(0, 21), "waiting for capacity:");
  EXPECT_EQ(job(tail).message, "waiting behind an earlier job");
  n.exit_all(*l, 0);
  auto next = n.next_as<LaunchOrder>();
  ASSERT_TRUE(next);
  EXPECT_EQ(next->job_id, both);
}

TEST_F(CoordinatorTest, AFailedRankStopsTheAttemptAndARestartGetsAFreshAttempt) {
  start();
  FakeAgent n(endpoint_, "node-1", 2);
  auto spec = command_job("retry", 1, 2);
  spec.job.max_restarts = 1;
  std::string id = submit(spec);
  auto l0 = n.next_as<LaunchOrder>();
  ASSERT_TRUE(l0);
  EXPECT_EQ(l0->restart_count, 0);
  n.exit_rank(*l0, 1, 7);
  auto stop = n.next_as<StopOrder>();
  ASSERT_TRUE(stop);
  EXPECT_EQ(stop->attempt, 0);
  EXPECT_EQ(job(id).state, "stopping");
  n.exit_rank(*l0, 0, 143, /*stopped=*/true);
  auto l1 = n.next_as<LaunchOrder>();
  ASSERT_TRUE(l1);
  EXPECT_EQ(l1->attempt, 1);
  EXPECT_EQ(l1->restart_count, 1);
  auto info = job(id);
  ASSERT_EQ(info.attempts.size(), 2u);
  EXPECT_EQ(info.attempts[0].state, "failed");
  EXPECT_EQ(info.attempts[0].root_cause.rank, 1);
  EXPECT_EQ(info.attempts[0].root_cause.reason, "exited with code 7");
  EXPECT_EQ(info.attempts[0].root_cause.last_lines, std::vector<std::string>{"boom from rank 1"});
  // A second failure exhausts the budget: the job fails with the root cause.
  n.exit_rank(*l1, 0, 0);
  n.exit_rank(*l1, 1, 9);
  EXPECT_TRUE(wait_for_state(id, "failed"));
  info = job(id);
  EXPECT_TRUE(info.has_root_cause);
  EXPECT_EQ(info.root_cause.rank, 1);
  EXPECT_EQ(info.restarts_used, 1);
}

TEST_F(CoordinatorTest, ASignalIsReportedByName) {
  start();
  FakeAgent n(endpoint_, "node-1", 1);
  std::string id = submit(command_job("sig", 1, 1));
  auto l = n.next_as<LaunchOrder>();
  ASSERT_TRUE(l);
  protocol::WorkerExit e;
  e.job_id = id;
  e.node = "node-1";
  e.signal = 9;
  n.send(e);
  EXPECT_TRUE(wait_for_state(id, "failed"));
  EXPECT_EQ(job(id).root_cause.reason, "killed by signal 9 (SIGKILL)");
}

TEST_F(CoordinatorTest, ASilentNodeIsLostAndItsJobFails) {
  start();
  FakeAgent a(endpoint_, "node-a", 1), b(endpoint_, "node-b", 1);
  std::string id = submit(command_job("lost", 2, 1));
  auto la = a.next_as<LaunchOrder>();
  auto lb = b.next_as<LaunchOrder>();
  ASSERT_TRUE(la && lb);
  clock_.advance(2s);
  beat(a, {{id, 0, 0, 100}});
  clock_.advance(1500ms);  // b silent for 3.5 s, a for 1.5 s
  EXPECT_TRUE(wait_until([&] { return node("node-b")->state == "lost"; }));
  EXPECT_EQ(node("node-a")->state, "alive");
  ASSERT_TRUE(a.next_as<StopOrder>());
  a.exit_all(*la, 143, true);
  EXPECT_TRUE(wait_for_state(id, "failed"));
  EXPECT_NE(job(id).root_cause.reason.find("node node-b lost"), std::string::npos);
  // The lost node's heartbeats are refused until it registers again.
  b.heartbeat();
  auto err = b.next_as<protocol::ErrorReply>();
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, "unknown_node");
}

TEST_F(CoordinatorTest, CancelStopsRunningAndQueuedJobs) {
  start();
  FakeAgent n(endpoint_, "node-1", 1);
  std::string run = submit(command_job("run", 1, 1));
  std::string wait = submit(command_job("wait", 1, 1));
  auto l = n.next_as<LaunchOrder>();
  ASSERT_TRUE(l);
  ASSERT_TRUE(client_->request<protocol::Ack>(protocol::CancelJob{wait}, 5s));
  EXPECT_EQ(job(wait).state, "cancelled");
  ASSERT_TRUE(client_->request<protocol::Ack>(protocol::CancelJob{"run"}, 5s));  // by name
  ASSERT_TRUE(n.next_as<StopOrder>());
  n.exit_all(*l, 143, true);
  EXPECT_TRUE(wait_for_state(run, "cancelled"));
  auto missing = client_->request<protocol::Ack>(protocol::CancelJob{"nope"}, 5s);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST_F(CoordinatorTest, WorkersOfAnAttemptThatIsNotCurrentAreStopped) {
  start();
  FakeAgent n(endpoint_, "node-1", 1);
  n.heartbeat({{"job-99", 3, 0, 1234}});
  auto stop = n.next_as<StopOrder>();
  ASSERT_TRUE(stop);
  EXPECT_EQ(stop->job_id, "job-99");
  EXPECT_EQ(stop->attempt, 3);
}

TEST_F(CoordinatorTest, TheStoreServesOnlyTheRunningAttempt) {
  start();
  FakeAgent n(endpoint_, "node-1", 1);
  std::string id = submit(command_job("kv", 1, 1));
  auto l = n.next_as<LaunchOrder>();
  ASSERT_TRUE(l);
  EXPECT_EQ(l->store_token.size(), 32u);
  auto set = store_request(*l, "set", {"k"});
  set.value = "v";
  n.send(set, 21);
  ASSERT_TRUE(n.next(protocol::StoreReply::kType));
  auto get = store_request(*l, "get", {"k"});
  get.timeout_ms = 1000;
  n.send(get, 22);
  auto got = n.next_as<protocol::StoreReply>();
  ASSERT_TRUE(got);
  EXPECT_EQ(got->value, "v");
  get.attempt = 1;  // no such attempt yet
  n.send(get, 23);
  auto err = n.next_as<protocol::ErrorReply>();
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, "aborted");
  n.exit_all(*l, 0);
  ASSERT_TRUE(wait_for_state(id, "succeeded"));
  get.attempt = 0;  // ended
  n.send(get, 24);
  err = n.next_as<protocol::ErrorReply>();
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, "aborted");
}

TEST_F(CoordinatorTest, InvalidJobsAreRefusedWithTheField) {
  start();
  auto bad = command_job("bad", 1, 1);
  bad.job.gpus_per_node = 0;
  auto r = client_->request<protocol::SubmitReply>(submit_of(bad), 5s);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("gpus_per_node"), std::string::npos);
  bad = command_job("bad", 1, 1);
  bad.command.argv.clear();
  r = client_->request<protocol::SubmitReply>(submit_of(bad), 5s);
  EXPECT_NE(r.status().message().find("command.argv"), std::string::npos);
}

TEST_F(CoordinatorTest, BrokenAndHostileMessagesGetErrorsAndTheCoordinatorGoesOn) {
  start();
  FakeAgent raw(endpoint_, "raw", 0, /*do_register=*/false);
  std::vector<std::string> bad = {
      "\x01\x02\x03 garbage \xff",
      R"({"v":2,"type":"submit","id":5,"body":{"job_toml":"[job]\nname = \"trunc)",
      R"({"v":2,"type":"launch_missiles","id":6})",
      R"({"v":2,"type":"submit","id":7})",
      R"({"v":2,"type":"submit","id":8,"body":{"job_toml":["not", "text"]}})",
      R"({"v":2,"type":"submit","id":8,"body":{"job_toml":"[job]\ngpus_per_node = \"x\"\n"}})",
      R"({"v":2,"type":"store","id":9,"body":{"value":"not base64!"}})",
      std::string(protocol::kMaxMessageBytes + 100, 'x'),
  };
  for (const auto& b : bad) {
    raw.send_raw(b);
    auto err = raw.next(protocol::ErrorReply::kType);
    EXPECT_TRUE(err) << "no error reply for: " << b.substr(0, 60);
  }
  raw.send_frames({"two", "frames"});
  EXPECT_TRUE(raw.next(protocol::ErrorReply::kType));
  // Far past the hard cap: ZeroMQ drops that connection; the daemon goes on.
  FakeAgent huge(endpoint_, "huge", 0, false);
  huge.send_raw(std::string(5 * protocol::kMaxMessageBytes, 'y'));
  auto list = client_->request<protocol::JobList>(protocol::JobQuery{}, 5s);
  EXPECT_TRUE(list) << list.status().message();
  FakeAgent good(endpoint_, "node-ok", 1);  // registration still works
}

TEST_F(CoordinatorTest, JobsSurviveARestartFromTheStateDirectory) {
  char templ[] = "/tmp/cohort-state-XXXXXX";
  std::string dir = ::mkdtemp(templ);
  start(dir);
  std::string queued = submit(command_job("queued", 1, 1));
  stop();
  start(dir);
  auto info = job(queued);
  EXPECT_EQ(info.state, "queued");
  EXPECT_EQ(info.name, "queued");
  std::string next = submit(command_job("next", 1, 1));
  EXPECT_NE(next, queued);  // ids are not reused
  FakeAgent n(endpoint_, "node-1", 1);
  auto l = n.next_as<LaunchOrder>();
  ASSERT_TRUE(l);
  EXPECT_EQ(l->job_id, queued);
  std::filesystem::remove_all(dir);
}

TEST_F(CoordinatorTest, ARunningAttemptSurvivesARestartWhenItsAgentReportsIt) {
  char templ[] = "/tmp/cohort-state-XXXXXX";
  std::string dir = ::mkdtemp(templ);
  start(dir);
  std::string id;
  protocol::LaunchOrder order;
  {
    FakeAgent n(endpoint_, "node-1", 1);
    id = submit(command_job("keep", 1, 1));
    auto l = n.next_as<LaunchOrder>();
    ASSERT_TRUE(l);
    order = *l;
  }
  stop();
  start(dir);
  FakeAgent n(endpoint_, "node-1", 1, false);
  n.heartbeat({{id, 0, 0, 4242}});
  ASSERT_TRUE(n.next_as<protocol::ErrorReply>());  // unknown_node: register again
  n.register_node({{id, 0, 0, 4242}});
  for (int i = 0; i < 5; ++i) {  // past the recovery grace (6 s): confirmed in time
    clock_.advance(2s);
    beat(n, {{id, 0, 0, 4242}});
  }
  EXPECT_EQ(job(id).state, "running");
  n.exit_all(order, 0);
  EXPECT_TRUE(wait_for_state(id, "succeeded"));
  auto info = job(id);
  EXPECT_EQ(info.attempts.size(), 1u);
  std::filesystem::remove_all(dir);
}

TEST_F(CoordinatorTest, AnAttemptNobodyReportsAfterARestartIsRestartedFree) {
  char templ[] = "/tmp/cohort-state-XXXXXX";
  std::string dir = ::mkdtemp(templ);
  start(dir);
  std::string id;
  {
    FakeAgent n(endpoint_, "node-1", 1);
    id = submit(command_job("gone", 1, 1));
    ASSERT_TRUE(n.next_as<LaunchOrder>());
  }
  stop();
  start(dir);
  FakeAgent n(endpoint_, "node-1", 1);  // comes back with no workers
  for (int i = 0; i < 4; ++i) {         // recovery grace is 2 × 3 s
    clock_.advance(2s);
    beat(n);
  }
  auto l = n.next_as<LaunchOrder>();
  ASSERT_TRUE(l);
  EXPECT_EQ(l->attempt, 1);
  auto info = job(id);
  EXPECT_EQ(info.restarts_used, 0);
  EXPECT_FALSE(info.attempts[1].counts_as_restart);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cohort::coordinator::testing

namespace cohort::coordinator::testing {
namespace {

TEST_F(CoordinatorTest, AFixedSizeJobThatLostANodeFailsAfterPlacementTimeout) {
  start();
  FakeAgent a(endpoint_, "node-a", 1), b(endpoint_, "node-b", 1);
  auto spec = command_job("fixed", 2, 1);
  spec.job.max_restarts = 3;
  spec.job.placement_timeout_s = 5;
  std::string id = submit(spec);
  auto la = a.next_as<LaunchOrder>();
  ASSERT_TRUE(b.next_as<LaunchOrder>() && la);
  for (int i = 0; i < 2; ++i) {  // node-b goes silent
    clock_.advance(2s);
    beat(a, {{id, 0, 0, 1}});
  }
  ASSERT_TRUE(a.next_as<StopOrder>());
  a.exit_all(*la, 143, true);
  EXPECT_TRUE(wait_for_state(id, "queued"));
  EXPECT_NE(job(id).message.find("waiting for nodes: the cluster has 1 of 2"), std::string::npos) << job(id).message;
  for (int i = 0; i < 3; ++i) {
    clock_.advance(2s);
    beat(a);
  }
  EXPECT_TRUE(wait_for_state(id, "failed"));
  EXPECT_NE(job(id).message.find("placement_timeout"), std::string::npos) << job(id).message;
}

TEST_F(CoordinatorTest, AnElasticJobGoesOnWithFewerNodesAndGrowsWhenOneJoins) {
  start();
  FakeAgent a(endpoint_, "node-a", 1), b(endpoint_, "node-b", 1);
  auto spec = command_job("elastic", 1, 1);
  spec.job.nodes.max = 3;
  spec.job.max_restarts = 0;  // scale-up needs no budget
  std::string id = submit(spec);
  auto la = a.next_as<LaunchOrder>();
  auto lb = b.next_as<LaunchOrder>();
  ASSERT_TRUE(la && lb);
  EXPECT_EQ(la->world_size, 2);
  FakeAgent c(endpoint_, "node-c", 1);
  ASSERT_TRUE(a.next_as<StopOrder>() && b.next_as<StopOrder>());
  a.exit_all(*la, 143, true);
  b.exit_all(*lb, 143, true);
  // node-a (rank 0) picks MASTER_PORT when it reads its order; then c gets its own.
  auto la1 = a.next_as<LaunchOrder>();
  ASSERT_TRUE(la1);
  auto lc = c.next_as<LaunchOrder>();
  ASSERT_TRUE(lc);
  EXPECT_EQ(lc->master_port, a.master_port_to_report);
  EXPECT_EQ(lc->world_size, 3);
  EXPECT_EQ(lc->attempt, 1);
  EXPECT_EQ(lc->restart_count, 0);
  EXPECT_EQ(job(id).restarts_used, 0);
}

}  // namespace
}  // namespace cohort::coordinator::testing

namespace cohort::coordinator::testing {
namespace {

// Valid messages of every type an agent or client sends, with random bytes
// flipped, cut short or fields set to odd values: the coordinator answers or
// ignores each and keeps working.
TEST_F(CoordinatorTest, SurvivesMutatedMessagesOfEveryType) {
  start();
  FakeAgent real(endpoint_, "node-real", 2);
  std::string id = submit(command_job("victim", 1, 2));
  auto launch = real.next_as<LaunchOrder>();
  ASSERT_TRUE(launch);

  protocol::WorkerExit exit;
  exit.job_id = id;
  exit.node = "node-real";
  exit.rank = 1;
  exit.exit_code = 1;
  protocol::StoreRequest store;
  store.job_id = id;
  store.op = "get";
  store.keys = {"k"};
  store.timeout_ms = 10;
  protocol::LogBatch logs;
  logs.job_id = id;
  logs.lines = {{0, 0, 0, "x"}};
  std::vector<std::string> seeds = {
      protocol::encode(protocol::RegisterNode{"node-z", "1.2.3.4", {{0, "u", "p", "n", 1}}, {{id, 0, 0, 1}}}, 1),
      protocol::encode(protocol::Heartbeat{"node-real", {{id, 0, 1, 2}}}, 2),
      protocol::encode(exit, 3),
      protocol::encode(logs, 4),
      protocol::encode(submit_of(command_job("m", 1, 1)), 5),
      protocol::encode(protocol::JobQuery{id, 0, {}}, 6),
      protocol::encode(protocol::CancelJob{"nope"}, 7),
      protocol::encode(protocol::LogQuery{id, -1, -1, 0, 10}, 8),
      protocol::encode(store, 9),
      protocol::encode(protocol::WorkersStarted{id, 0, "node-real", 29600}, 15),
      protocol::encode(protocol::NodeLeaving{"node-real", "spoofed"}, 16),
      protocol::encode(protocol::NodeLeft{"node-real"}, 17),
      protocol::encode(protocol::DrainNode{"nope", true}, 18),
      protocol::encode(protocol::UndrainNode{"nope"}, 19),
      protocol::encode(protocol::LogQuery{id, -1, -1, 0, 10, 5}, 20),
  };
  // Odd but well-formed values.
  seeds.push_back(R"({"v":2,"type":"worker_exit","id":10,"body":{"job_id":")" + id +
                  R"(","attempt":-5,"rank":2147483647,"node":"node-real"}})");
  seeds.push_back(R"({"v":2,"type":"submit","id":11,"body":{"job_toml":"[job]\nname = \"h\"\nkind = \"command\"\ngpus_per_node = 1000000000\noutput_dir = \"/tmp/h\"\n[command]\nargv = [\"x\"]\n"}})");
  seeds.push_back(R"({"v":2,"type":"log_query","id":12,"body":{"job_id":")" + id + R"(","max_lines":-7,"after_seq":18446744073709551615}})");
  seeds.push_back(R"({"v":2,"type":"store","id":13,"body":{"job_id":")" + id + R"(","op":"add","keys":["n"],"delta":9223372036854775807}})");
  seeds.push_back(R"({"v":2,"type":"heartbeat","id":14,"body":{"node":"node-real","running":[{"job_id":")" + id + R"(","rank":-1}]}})");

  FakeAgent fuzz(endpoint_, "fuzz", 0, false);
  std::mt19937 rng(1234);
  for (int round = 0; round < 400; ++round) {
    std::string m = seeds[rng() % seeds.size()];
    switch (rng() % 4) {
      case 0:  // flip a few bytes
        for (int k = 0; k < 3; ++k) m[rng() % m.size()] = char(rng() % 256);
        break;
      case 1:  // cut short
        m.resize(rng() % m.size());
        break;
      case 2:  // duplicate a slice
        m.insert(rng() % m.size(), m.substr(0, rng() % m.size()));
        break;
      default:  // as is
        break;
    }
    fuzz.send_raw(m);
  }
  auto list = client_->request<protocol::JobList>(protocol::JobQuery{}, 10s);
  ASSERT_TRUE(list) << list.status().message();
  // The real agent is still served.
  real.exit_all(*launch, 0);
  auto info = job(id);
  EXPECT_FALSE(info.id.empty());
}

}  // namespace
}  // namespace cohort::coordinator::testing
