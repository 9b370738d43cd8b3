// The dashboard under attack (issue 34, items 6 and 8): a cookie-carrying
// cancel from another origin or without the page's CSRF token is refused,
// a job's details and logs need the token once one is configured, and
// slow connections do not starve /health.
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/write.hpp>
#include <nlohmann/json.hpp>

#include "fake_agent.h"
#include "http_client.h"

namespace cohort::coordinator::testing {
namespace {

std::string csrf_of(const std::string& page) {
  auto at = page.find("name=csrf value=\"");
  return at == std::string::npos ? "" : page.substr(at + 17, 32);
}

TEST_F(CoordinatorTest, ACrossOriginCancelIsRefused) {
  start("", "s3cret");
  std::string id = submit(command_job("victim", 1, 1));
  int port = coordinator_->http_port();
  std::string cookie = "cohort_token=s3cret";
  std::string csrf = csrf_of(http_call(port, http::verb::get, "/jobs/" + id, "", cookie).body);
  ASSERT_EQ(csrf.size(), 32u);
  auto post = [&](std::map<std::string, std::string> headers, const std::string& body) {
    return http_call(port, http::verb::post, "/jobs/" + id + "/cancel", "", cookie, headers, body)
        .status;
  };
  // A page on another port of the same host: same site, another origin.
  EXPECT_EQ(post({{"Origin", "http://localhost:9999"}}, "csrf=" + csrf), 403);
  EXPECT_EQ(post({{"Referer", "http://localhost:9999/evil.html"}}, "csrf=" + csrf), 403);
  EXPECT_EQ(post({}, "csrf=" + csrf), 403) << "neither Origin nor Referer";
  EXPECT_EQ(post({{"Origin", "http://localhost"}}, ""), 403) << "no CSRF token";
  EXPECT_EQ(post({{"Origin", "http://localhost"}}, "csrf=00000000000000000000000000000000"), 403);
  EXPECT_EQ(job(id).state, "queued");
  EXPECT_EQ(post({{"Referer", "http://localhost/jobs/" + id}}, "csrf=" + csrf), 303);
  EXPECT_EQ(job(id).state, "cancelled");
}

TEST_F(CoordinatorTest, TheBearerTokenCancelsWithoutAPage) {
  start("", "s3cret");
  std::string id = submit(command_job("api", 1, 1));
  auto r = http_call(coordinator_->http_port(), http::verb::post, "/api/jobs/" + id + "/cancel",
                     "s3cret");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(job(id).state, "cancelled");
}

TEST_F(CoordinatorTest, WithATokenAJobsDetailsAndLogsNeedIt) {
  start("", "s3cret");
  FakeAgent a(endpoint_, "node-a", 1);
  std::string id = submit(command_job("secretive", 1, 1));
  ASSERT_TRUE(a.next_as<protocol::LaunchOrder>());
  a.send(protocol::LogBatch{id, {{0, 0, 0, "password=hunter2"}}});
  int port = coordinator_->http_port();
  ASSERT_TRUE(wait_until([&] {
    return http_call(port, http::verb::get, "/api/jobs/" + id + "/logs", "s3cret")
               .body.find("hunter2") != std::string::npos;
  }));
  for (std::string path : {"/api/jobs/" + id + "/logs", "/api/jobs/" + id, "/jobs/" + id,
                           "/api/jobs/" + id + "/metrics"}) {
    auto anonymous = http_call(port, http::verb::get, path);
    EXPECT_EQ(anonymous.status, 401) << path;
    EXPECT_EQ(anonymous.body.find("hunter2"), std::string::npos) << path;
    EXPECT_EQ(http_call(port, http::verb::get, path, "", "cohort_token=s3cret").status, 200)
        << path;
    EXPECT_EQ(http_call(port, http::verb::get, path, "wrong").status, 401) << path;
  }
  EXPECT_EQ(http_call(port, http::verb::get, "/api/jobs").status, 200);
  EXPECT_EQ(http_call(port, http::verb::get, "/health").status, 200);
}

// 100 connections that send one byte and then nothing (slowloris) on
// loopback, the same address as the health check.
TEST_F(CoordinatorTest, SlowConnectionsDoNotStarveHealth) {
  start();
  int port = coordinator_->http_port();
  boost::asio::io_context io;
  std::vector<std::unique_ptr<tcp::socket>> slow;
  for (int i = 0; i < 100; ++i) {
    auto s = std::make_unique<tcp::socket>(io);
    s->connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), uint16_t(port)));
    boost::asio::write(*s, boost::asio::buffer("G", 1));
    slow.push_back(std::move(s));
  }
  std::this_thread::sleep_for(200ms);
  for (int i = 0; i < 5; ++i) {
    auto began = std::chrono::steady_clock::now();
    auto r = http_call(port, http::verb::get, "/health");
    auto took = std::chrono::steady_clock::now() - began;
    EXPECT_EQ(r.status, 200) << "attempt " << i;
    EXPECT_LT(took, 2s) << "attempt " << i;
  }
}

}  // namespace
}  // namespace cohort::coordinator::testing
