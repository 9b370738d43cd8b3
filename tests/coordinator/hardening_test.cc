// Issue 19's findings against the coordinator, each reproduced: node
// hijack, forged exits and log lines, the store without its token, fields
// without byte caps, unpaged lists, no way to forget jobs and nodes, and
// finished jobs kept forever.
#include <cstdlib>
#include <filesystem>

#include "fake_agent.h"

namespace cohort::coordinator::testing {
namespace {

using protocol::ErrorReply;
using protocol::LaunchOrder;

TEST_F(CoordinatorTest, HeartbeatsFromAnotherConnectionDoNotTakeOverANode) {
  start();
  FakeAgent real(endpoint_, "n1", 1);
  FakeAgent hijacker(endpoint_, "n1", 1, /*do_register=*/false);
  for (int i = 0; i < 5; ++i) hijacker.heartbeat();
  for (int i = 0; i < 5; ++i) {
    auto refused = hijacker.next_as<ErrorReply>();
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->code, "permission denied");
  }
  // Registering the name from another connection is refused too.
  hijacker.send(protocol::RegisterNode{"n1", "10.6.6.6", {{0, "evil", "", "fake", 0}}, {}}, 7);
  auto taken = hijacker.next_as<ErrorReply>();
  ASSERT_TRUE(taken);
  EXPECT_EQ(taken->code, "node_taken");
  // The launch order, with the job's environment, goes to the real agent only.
  auto job = command_job("secret", 1, 1);
  job.job.env["AWS_SECRET_ACCESS_KEY"] = "hunter2";
  submit(job);
  EXPECT_TRUE(real.next_as<LaunchOrder>());
  EXPECT_FALSE(hijacker.next_as<LaunchOrder>(300ms));
  EXPECT_EQ(node("n1")->address, "10.0.0.1");
}

TEST_F(CoordinatorTest, AForgedWorkerExitFromAnotherConnectionIsRefused) {
  start();
  FakeAgent real(endpoint_, "n1", 1);
  std::string id = submit(command_job("victim", 1, 1));
  auto launch = real.next_as<LaunchOrder>();
  ASSERT_TRUE(launch);
  FakeAgent forger(endpoint_, "forger", 0, /*do_register=*/false);
  forger.send_raw(R"({"v":2,"type":"worker_exit","id":3,"body":{"job_id":")" + id +
                  R"(","attempt":0,"node":"n1","rank":0,"exit_code":42,"last_lines":["forged"]}})");
  auto refused = forger.next_as<ErrorReply>();
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->code, "permission denied");
  EXPECT_EQ(job(id).state, "running");
  // Log lines for the job from a connection that runs none of its ranks are dropped.
  protocol::LogBatch fake{id, {{0, 0, 0, "injected"}}};
  forger.send(fake);
  FakeAgent other(endpoint_, "n2", 1);  // a real node, but not this job's
  other.send(fake);
  protocol::LogBatch mine{id, {{0, 0, 0, "genuine"}}};
  real.send(mine);
  std::vector<protocol::LogLine> lines;
  ASSERT_TRUE(wait_until([&] {
    auto r = client_->request<protocol::LogReply>(protocol::LogQuery{id, -1, -1, 0, 100}, 5s);
    if (r) lines = r->lines;
    return !lines.empty();
  }));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].text, "genuine");
  real.exit_all(*launch, 0);
  EXPECT_TRUE(wait_for_state(id, "succeeded"));
}

TEST_F(CoordinatorTest, TheStoreNeedsTheAttemptsTokenAndOneOfItsNodes) {
  start();
  FakeAgent n(endpoint_, "n1", 1);
  submit(command_job("kv", 1, 1));
  auto l = n.next_as<LaunchOrder>();
  ASSERT_TRUE(l);
  auto set = store_request(*l, "set", {"k"});
  set.value = "v";
  set.token = "guessed";
  n.send(set, 1);
  auto wrong = n.next_as<ErrorReply>();
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->code, "permission denied");
  // The right token from a connection that is not one of the attempt's nodes.
  FakeAgent stranger(endpoint_, "stranger", 0, false);
  set.token = l->store_token;
  stranger.send(set, 2);
  ASSERT_TRUE(stranger.next_as<ErrorReply>());
  // A client cannot read it either.
  auto get = store_request(*l, "get", {"k"});
  EXPECT_EQ(client_->request<protocol::StoreReply>(get, 5s).status().code(), StatusCode::kPermissionDenied);
}

TEST_F(CoordinatorTest, StoreAddRefusesToOverflowAndAHugeTimeoutStillWaits) {
  start();
  FakeAgent n(endpoint_, "n1", 1);
  submit(command_job("kv", 1, 1));
  auto l = n.next_as<LaunchOrder>();
  ASSERT_TRUE(l);
  auto add = store_request(*l, "add", {"n"});
  add.delta = INT64_MAX;
  n.send(add, 1);
  ASSERT_TRUE(n.next_as<protocol::StoreReply>());
  n.send(add, 2);
  auto overflow = n.next_as<ErrorReply>();
  ASSERT_TRUE(overflow);
  EXPECT_NE(overflow->message.find("overflows"), std::string::npos) << overflow->message;
  auto get = store_request(*l, "get", {"later"});
  get.timeout_ms = INT64_MAX;  // was: now + INT64_MAX ms wrapped and timed out at once
  n.send(get, 3);
  EXPECT_FALSE(n.next(protocol::StoreReply::kType, 300ms));
  EXPECT_FALSE(n.next(ErrorReply::kType, 10ms));
  auto set = store_request(*l, "set", {"later"});
  set.value = "x";
  n.send(set, 4);
  auto got = n.next_as<protocol::StoreReply>();
  ASSERT_TRUE(got);
}

TEST_F(CoordinatorTest, OversizedFieldsAreRefusedAndListsStayAnswerable) {
  start();
  auto big = command_job("x", 1, 1);
  big.job.name = std::string(7 << 20, 'n');  // two of these had broken `cohort jobs` for good
  auto r = client_->request<protocol::SubmitReply>(submit_of(big), 5s);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("the resolved job file is 7340"), std::string::npos)
      << r.status().message().substr(0, 200);
  EXPECT_NE(r.status().message().find("at most 1048576"), std::string::npos) << r.status().message().substr(0, 200);
  big.job.name = std::string(200 << 10, 'n');  // within the file's cap: the name's own
  r = client_->request<protocol::SubmitReply>(submit_of(big), 5s);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("job.name: 204800 characters long; at most 128"), std::string::npos)
      << r.status().message().substr(0, 200);
  EXPECT_LT(r.status().message().size(), 2048u) << "the refusal quotes the file";
  auto many = command_job("gpus", 1, 1);
  many.job.gpus_per_node = 1000000000;
  EXPECT_FALSE(client_->request<protocol::SubmitReply>(submit_of(many), 5s));
  auto nan = command_job("nan", 1, 1);
  nan.job.stop_grace_s = -1;
  EXPECT_FALSE(client_->request<protocol::SubmitReply>(submit_of(nan), 5s));
  auto env = command_job("env", 1, 1);
  env.job.env["A=B"] = "1";
  EXPECT_FALSE(client_->request<protocol::SubmitReply>(submit_of(env), 5s));
  // A node with 400k GPUs had wedged `cohort nodes` (100k fit in one message).
  FakeAgent huge(endpoint_, "huge", 0, false);
  protocol::RegisterNode reg{"huge", "10.0.0.9", {}, {}};
  reg.gpus.resize(100000, {0, "u", "p", "n", 1});
  huge.send(reg, 1);
  auto refused = huge.next_as<ErrorReply>(10s);
  ASSERT_TRUE(refused);
  EXPECT_NE(refused->message.find("100000 GPUs; at most 1024"), std::string::npos) << refused->message;
  EXPECT_TRUE(client_->request<protocol::JobList>(protocol::JobQuery{}, 5s));
  EXPECT_TRUE(client_->request<protocol::NodeList>(protocol::NodeQuery{}, 5s));
  EXPECT_FALSE(node("huge"));
}

TEST_F(CoordinatorTest, TheJobListIsPagedAndFilteredByState) {
  start();
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(submit(command_job("q" + std::to_string(i), 1, 1)));
  EXPECT_TRUE(client_->request<protocol::Ack>(protocol::CancelJob{ids[0]}, 5s));
  protocol::JobQuery q;
  q.limit = 2;
  auto page = client_->request<protocol::JobList>(q, 5s);
  ASSERT_TRUE(page);
  ASSERT_EQ(page->jobs.size(), 2u);
  EXPECT_EQ(page->jobs[0].id, ids[3]);  // the newest two, oldest first
  EXPECT_EQ(page->jobs[1].id, ids[4]);
  EXPECT_TRUE(page->more);
  EXPECT_EQ(page->total, 5);
  q.limit = 0;
  q.state = "cancelled";
  auto cancelled = client_->request<protocol::JobList>(q, 5s);
  ASSERT_TRUE(cancelled);
  ASSERT_EQ(cancelled->jobs.size(), 1u);
  EXPECT_EQ(cancelled->jobs[0].id, ids[0]);
  EXPECT_FALSE(cancelled->more);
}

TEST_F(CoordinatorTest, FinishedJobsAndLostNodesCanBeRemoved) {
  start();
  std::string done = submit(command_job("done", 1, 1));
  std::string queued = submit(command_job("queued", 1, 1));
  EXPECT_TRUE(client_->request<protocol::Ack>(protocol::CancelJob{done}, 5s));
  auto removed = client_->request<protocol::Ack>(protocol::RemoveJob{done}, 5s);
  ASSERT_TRUE(removed) << removed.status().message();
  EXPECT_TRUE(job(queued).id == queued);
  EXPECT_EQ(client_->request<protocol::JobList>(protocol::JobQuery{done, 0, {}}, 5s).status().code(),
            StatusCode::kNotFound);
  auto busy = client_->request<protocol::Ack>(protocol::RemoveJob{queued}, 5s);
  ASSERT_FALSE(busy);
  EXPECT_NE(busy.status().message().find("cancel it first"), std::string::npos);
  {
    FakeAgent gone(endpoint_, "gone", 1);
    EXPECT_FALSE(client_->request<protocol::Ack>(protocol::RemoveNode{"gone"}, 5s));  // alive
  }
  ASSERT_TRUE(wait_for_state(queued, "running"));
  EXPECT_TRUE(client_->request<protocol::Ack>(protocol::CancelJob{queued}, 5s));
  clock_.advance(4s);  // past heartbeat_timeout: lost
  ASSERT_TRUE(wait_until([&] { return node("gone") && node("gone")->state == "lost"; }));
  ASSERT_TRUE(wait_for_state(queued, "cancelled"));
  auto ok = client_->request<protocol::Ack>(protocol::RemoveNode{"gone"}, 5s);
  ASSERT_TRUE(ok) << ok.status().message();
  EXPECT_FALSE(node("gone"));
}

TEST_F(CoordinatorTest, FinishedJobsLeaveMemoryBeyondTheRetention) {
  configure_ = [](CoordinatorOptions& o) { o.max_finished_jobs = 3; };
  start();
  std::vector<std::string> ids;
  for (int i = 0; i < 6; ++i) {
    ids.push_back(submit(command_job("r" + std::to_string(i), 1, 1)));
    EXPECT_TRUE(client_->request<protocol::Ack>(protocol::CancelJob{ids.back()}, 5s));
  }
  clock_.advance(11s);  // the retention is applied every 10 s of the clock
  ASSERT_TRUE(wait_until([&] {
    auto all = client_->request<protocol::JobList>(protocol::JobQuery{}, 5s);
    return all && all->total == 3;
  }));
  auto all = client_->request<protocol::JobList>(protocol::JobQuery{}, 5s);
  EXPECT_EQ(all->jobs.front().id, ids[3]);
  // `cohort status` of a retired job says what became of it, by id and by name.
  for (const std::string& key : {ids[0], std::string("r1")}) {
    auto gone = client_->request<protocol::JobList>(protocol::JobQuery{key, 0, {}}, 5s);
    ASSERT_FALSE(gone);
    EXPECT_EQ(gone.status().code(), StatusCode::kNotFound);
    const std::string& text = gone.status().message();
    EXPECT_NE(text.find("finished (cancelled at 20"), std::string::npos) << text;
    EXPECT_NE(text.find("retired from the coordinator's memory at 20"), std::string::npos) << text;
    EXPECT_NE(text.find("at most 3"), std::string::npos) << text;
  }
  auto logs = client_->request<protocol::LogReply>(protocol::LogQuery{ids[2]}, 5s);
  ASSERT_FALSE(logs);
  EXPECT_NE(logs.status().message().find("job " + ids[2] + " (r2) finished"), std::string::npos);
  auto never = client_->request<protocol::JobList>(protocol::JobQuery{"job-999", 0, {}}, 5s);
  EXPECT_EQ(never.status().message(), "no job 'job-999'");
}

TEST_F(CoordinatorTest, ARetiredJobCanBeRemovedFromTheDatabase) {
  char dir[] = "/tmp/cohort-retired-XXXXXX";
  ASSERT_TRUE(::mkdtemp(dir));
  configure_ = [](CoordinatorOptions& o) { o.max_finished_jobs = 1; };
  start(dir);
  std::string old = submit(command_job("old", 1, 1));
  EXPECT_TRUE(client_->request<protocol::Ack>(protocol::CancelJob{old}, 5s));
  std::string newer = submit(command_job("newer", 1, 1));
  EXPECT_TRUE(client_->request<protocol::Ack>(protocol::CancelJob{newer}, 5s));
  clock_.advance(11s);
  ASSERT_TRUE(wait_until([&] { return !client_->request<protocol::JobList>(protocol::JobQuery{old, 0, {}}, 5s); }));
  auto status = client_->request<protocol::JobList>(protocol::JobQuery{old, 0, {}}, 5s);
  EXPECT_NE(status.status().message().find("its record is in the state database"), std::string::npos)
      << status.status().message();
  auto removed = client_->request<protocol::Ack>(protocol::RemoveJob{old}, 5s);
  ASSERT_TRUE(removed) << removed.status().message();
  // Gone from the database too: after a restart nothing is retired again.
  stop();
  start(dir);
  clock_.advance(11s);
  auto again = client_->request<protocol::JobList>(protocol::JobQuery{old, 0, {}}, 5s);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.status().message(), "no job '" + old + "'");
  EXPECT_EQ(job(newer).id, newer);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cohort::coordinator::testing
