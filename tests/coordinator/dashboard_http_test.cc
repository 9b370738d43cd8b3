// The dashboard over a real socket: training figures from rank 0's node
// reach the JSON, the page and /metrics (and from nowhere else), the log
// tail API, GPU reports, and the token that a browser keeps in a cookie.
#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "coordinator/http_api.h"
#include "fake_agent.h"
#include "http_client.h"

namespace cohort::coordinator::testing {
namespace {

class DashboardTest : public CoordinatorTest {
 protected:
  protocol::MetricBatch batch(const protocol::LaunchOrder& order, const std::string& node, int64_t from, int64_t to) {
    protocol::MetricBatch b;
    b.job_id = order.job_id;
    b.attempt = order.attempt;
    b.node = node;
    b.total_steps = 100;
    for (int64_t s = from; s <= to; ++s) b.rows.push_back({s, 1.7e9 + double(s), {{"loss", 10.0 / double(s)}, {"lr", 1e-3}}});
    return b;
  }
  nlohmann::json series(const std::string& id) {
    return nlohmann::json::parse(http_call(coordinator_->http_port(), http::verb::get, "/api/jobs/" + id + "/metrics").body);
  }
  static jobs::JobSpec train_job(const std::string& name, int nodes) {
    return jobs::testing::train_job(name, nodes, 1);
  }
};

TEST_F(DashboardTest, TrainingFiguresFromRankZerosNodeReachTheJsonThePageAndMetrics) {
  start();
  FakeAgent a(endpoint_, "node-a", 1), b(endpoint_, "node-b", 1);
  std::string id = submit(train_job("fig", 2));
  auto oa = a.next_as<protocol::LaunchOrder>();
  auto ob = b.next_as<protocol::LaunchOrder>();
  ASSERT_TRUE(oa && ob);
  const auto& rank0 = oa->node_rank == 0 ? *oa : *ob;
  FakeAgent& rank0_agent = oa->node_rank == 0 ? a : b;
  FakeAgent& other = oa->node_rank == 0 ? b : a;
  other.send(batch(rank0, rank0_agent.name(), 1, 5));   // claims to be rank 0's node from another connection
  other.send(batch(rank0, other.name(), 1, 5));         // not rank 0's node
  rank0_agent.send(batch(rank0, rank0_agent.name(), 1, 20));
  ASSERT_TRUE(wait_until([&] { return series(id)["training"].size() == 20; })) << series(id).dump();
  auto s = series(id);
  EXPECT_EQ(s["total_steps"], 100);
  EXPECT_EQ(s["training"][19]["step"], 20);
  EXPECT_DOUBLE_EQ(s["training"][19]["loss"].get<double>(), 0.5);
  auto stale = batch(rank0, rank0_agent.name(), 21, 30);
  stale.attempt = rank0.attempt + 1;  // no such attempt
  rank0_agent.send(stale);
  int port = coordinator_->http_port();
  std::string page = http_call(port, http::verb::get, "/jobs/" + id).body;
  EXPECT_NE(page.find("id=\"plot-loss\""), std::string::npos);
  EXPECT_NE(page.find("data-label=\"loss\" data-points=\"20\""), std::string::npos);
  EXPECT_NE(page.find("20 of 100"), std::string::npos);
  EXPECT_EQ(page.find("class=cancel"), std::string::npos) << "no cancel button without a token";
  std::string metrics = http_call(port, http::verb::get, "/metrics").body;
  EXPECT_NE(metrics.find("cohort_job_step{job=\"" + id + "\"} 20"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("cohort_job_loss{job=\"" + id + "\"} 0.5"), std::string::npos) << metrics;
  EXPECT_EQ(series(id)["training"].size(), 20u);
  EXPECT_NE(http_call(port, http::verb::get, "/jobs/" + id + "?x=time").body.find("time (UTC)"), std::string::npos);
}

TEST_F(DashboardTest, TheLogApiServesTheNewestLinesPerRankAndResumesAfterASeq) {
  start("", "t0k");  // without a token the page shows no worker output
  FakeAgent a(endpoint_, "node-a", 2);
  std::string id = submit(command_job("logs", 1, 2));
  ASSERT_TRUE(a.next_as<protocol::LaunchOrder>());
  protocol::LogBatch lines{id, {}};
  for (int i = 0; i < 30; ++i) lines.lines.push_back({0, 0, i % 2, "line " + std::to_string(i)});
  a.send(lines);
  int port = coordinator_->http_port();
  auto get = [&](const std::string& query) {
    return nlohmann::json::parse(http_call(port, http::verb::get, "/api/jobs/" + id + "/logs" + query, "t0k").body);
  };
  ASSERT_TRUE(wait_until([&] { return get("").value("last_seq", 0) == 30; }));
  auto tail = get("?tail=3&rank=1");
  ASSERT_EQ(tail["lines"].size(), 3u);
  EXPECT_EQ(tail["lines"][0]["text"], "line 25");
  EXPECT_EQ(tail["lines"][2]["text"], "line 29");
  EXPECT_EQ(tail["last_seq"], 30);
  EXPECT_EQ(get("?after=28")["lines"].size(), 2u);
  EXPECT_EQ(get("?after=30&tail=100")["lines"].size(), 0u);
  EXPECT_EQ(get("?rank=banana&tail=1")["lines"].size(), 1u) << "a bad number reads as its default";
  EXPECT_EQ(http_call(port, http::verb::get, "/api/jobs/job-404/logs", "t0k").status, 404);
  std::string page = http_call(port, http::verb::get, "/jobs/" + id + "?rank=0", "", "cohort_token=t0k").body;
  EXPECT_NE(page.find("[rank 0] line 28"), std::string::npos);
  EXPECT_EQ(page.find("[rank 1] line 29"), std::string::npos);
}

TEST_F(DashboardTest, GpuReportsShowOnTheClusterPageOnlyFromTheRegisteredConnection) {
  start();
  FakeAgent a(endpoint_, "node-a", 2);
  ASSERT_TRUE(wait_until([&] { return node("node-a").has_value(); }));
  FakeAgent impostor(endpoint_, "node-a", 2, /*do_register=*/false);
  impostor.send(protocol::GpuReport{"node-a", {{0, 0.99, 1, ""}}});
  a.send(protocol::GpuReport{"node-a", {{0, 0.5, 3ull << 30, ""}, {1, 0.25, 0, ""}, {7, 1.0, 0, ""}}});
  ASSERT_TRUE(wait_until([&] { auto n = node("node-a"); return n && n->gpu_samples.size() == 2; }));
  EXPECT_DOUBLE_EQ(node("node-a")->gpu_samples[0].utilization, 0.5);
  std::string page = http_call(coordinator_->http_port(), http::verb::get, "/").body;
  EXPECT_NE(page.find("3.0 GiB"), std::string::npos);
  EXPECT_NE(page.find(" 50%"), std::string::npos);
}

TEST_F(DashboardTest, TheTokenGivenOnceIsKeptInACookieThatShowsAndWorksTheCancelButton) {
  start("", "s3cret");
  std::string id = submit(command_job("tok", 1, 1));
  int port = coordinator_->http_port();
  EXPECT_EQ(http_call(port, http::verb::get, "/jobs/" + id + "?token=wrong").status, 401);
  auto login = http_call(port, http::verb::get, "/jobs/" + id + "?token=s3cret");
  EXPECT_EQ(login.status, 303);
  EXPECT_EQ(login.headers["Location"], "/jobs/" + id);
  EXPECT_NE(login.headers["Set-Cookie"].find("cohort_token=s3cret"), std::string::npos);
  EXPECT_NE(login.headers["Set-Cookie"].find("SameSite=Strict"), std::string::npos);
  EXPECT_NE(login.headers["Set-Cookie"].find("HttpOnly"), std::string::npos);
  std::string with = http_call(port, http::verb::get, "/jobs/" + id, "", "cohort_token=s3cret").body;
  EXPECT_NE(with.find("class=cancel"), std::string::npos);
  EXPECT_EQ(http_call(port, http::verb::post, "/jobs/" + id + "/cancel", "", "cohort_token=nope").status, 401);
  EXPECT_EQ(job(id).state, "queued");
  std::string csrf = with.substr(with.find("name=csrf value=\"") + 17, 32);
  auto cancel = http_call(port, http::verb::post, "/jobs/" + id + "/cancel", "", "other=1; cohort_token=s3cret",
                          {{"Origin", "http://localhost"}}, "csrf=" + csrf);
  EXPECT_EQ(cancel.status, 303);
  EXPECT_EQ(job(id).state, "cancelled");
  std::string after = http_call(port, http::verb::get, "/jobs/" + id, "", "cohort_token=s3cret").body;
  EXPECT_EQ(after.find("class=cancel"), std::string::npos) << "no cancel button on a finished job";
}

// (Job names are checked at submission now, so markup cannot get in by them.)
TEST_F(DashboardTest, UnknownPagesAre404AndTheServerGoesOn) {
  start();
  std::string id = submit(command_job("x", 1, 1));
  int port = coordinator_->http_port();
  EXPECT_EQ(http_call(port, http::verb::get, "/jobs/job-404").status, 404);
  EXPECT_EQ(http_call(port, http::verb::get, "/jobs/" + id + "/nothing").status, 404);
  EXPECT_EQ(http_call(port, http::verb::get, "/api/jobs/" + id + "/nothing").status, 404);
  EXPECT_EQ(http_call(port, http::verb::get, "/jobs/%zz%").status, 404);
  EXPECT_EQ(http_call(port, http::verb::get, "/no/%ff%fe").status, 404) << "a path that is not UTF-8";
  EXPECT_EQ(http_call(port, http::verb::get, "/jobs/%ff?rank=%fe").status, 404);
  EXPECT_EQ(http_call(port, http::verb::get, "/api/jobs/%c3/logs").status, 404);
  EXPECT_EQ(http_call(port, http::verb::get, "/").status, 200) << "the server goes on";
}

TEST_F(DashboardTest, WithoutATokenTheLogTailIsNotShown) {
  start();
  FakeAgent a(endpoint_, "node-a", 1);
  std::string id = submit(command_job("quiet", 1, 1));
  ASSERT_TRUE(a.next_as<protocol::LaunchOrder>());
  a.send(protocol::LogBatch{id, {{0, 0, 0, "password=hunter2"}}});
  int port = coordinator_->http_port();
  ASSERT_TRUE(wait_until([&] { return !job(id).attempts.empty(); }));
  EXPECT_EQ(http_call(port, http::verb::get, "/api/jobs/" + id + "/logs?tail=10").status, 403);
  std::string page = http_call(port, http::verb::get, "/jobs/" + id).body;
  EXPECT_EQ(page.find("hunter2"), std::string::npos);
  EXPECT_NE(page.find("id=log-hidden"), std::string::npos);
}

TEST(HttpApiStart, RefusesANonLoopbackAddressWithoutAToken) {
  boost::asio::io_context io;
  auto api = HttpApi::start(io, "0.0.0.0:0", HttpSources{}, "");
  ASSERT_FALSE(api);
  EXPECT_NE(api.status().message().find("--http-token"), std::string::npos);
}

}  // namespace
}  // namespace cohort::coordinator::testing
