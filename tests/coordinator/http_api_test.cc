// The HTTP API over a real socket: JSON views, metrics, the read-only rule
// and the token, and bad requests that leave the server running.
#include <nlohmann/json.hpp>

#include "fake_agent.h"
#include "http_client.h"

namespace cohort::coordinator::testing {
namespace {


class HttpApiTest : public CoordinatorTest {};

TEST_F(HttpApiTest, ServesJobsNodesAndMetrics) {
  start();
  FakeAgent a(endpoint_, "node-a", 2);
  std::string id = submit(command_job("web", 1, 2));
  ASSERT_TRUE(a.next_as<protocol::LaunchOrder>());
  int port = coordinator_->http_port();
  ASSERT_GT(port, 0);
  auto jobs = http_call(port, http::verb::get, "/api/jobs");
  EXPECT_EQ(jobs.status, 200);
  auto j = nlohmann::json::parse(jobs.body);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["state"], "running");
  auto one = http_call(port, http::verb::get, "/api/jobs/" + id);
  EXPECT_EQ(nlohmann::json::parse(one.body)["name"], "web");
  EXPECT_EQ(http_call(port, http::verb::get, "/api/jobs/job-404").status, 404);
  auto nodes = nlohmann::json::parse(http_call(port, http::verb::get, "/api/nodes").body);
  EXPECT_EQ(nodes[0]["gpus_free"], 0);
  auto metrics = http_call(port, http::verb::get, "/metrics").body;
  EXPECT_NE(metrics.find("cohort_nodes{state=\"alive\"} 1"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("cohort_jobs{state=\"running\"} 1"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("cohort_gpus{state=\"total\"} 2"), std::string::npos) << metrics;
  EXPECT_NE(http_call(port, http::verb::get, "/").body.find("node-a"), std::string::npos);
}

TEST_F(HttpApiTest, IsReadOnlyWithoutAToken) {
  start();
  std::string id = submit(command_job("ro", 1, 1));
  auto r = http_call(coordinator_->http_port(), http::verb::post, "/api/jobs/" + id + "/cancel", "guess");
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(job(id).state, "queued");
}

TEST_F(HttpApiTest, CancelNeedsTheRightToken) {
  start("", "s3cret");
  std::string id = submit(command_job("tok", 1, 1));
  int port = coordinator_->http_port();
  EXPECT_EQ(http_call(port, http::verb::post, "/api/jobs/" + id + "/cancel", "wrong").status, 401);
  EXPECT_EQ(job(id).state, "queued");
  EXPECT_EQ(http_call(port, http::verb::post, "/api/jobs/" + id + "/cancel", "s3cret").status, 200);
  EXPECT_EQ(job(id).state, "cancelled");
}

TEST_F(HttpApiTest, GarbageRequestsGetAnErrorAndTheServerGoesOn) {
  start();
  int port = coordinator_->http_port();
  {
    boost::asio::io_context io;
    tcp::socket socket(io);
    socket.connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), uint16_t(port)));
    std::string junk = "\x16\x03\x01 this is not HTTP\r\n\r\n";
    boost::asio::write(socket, boost::asio::buffer(junk));
    char buf[256];
    boost::system::error_code ec;
    size_t n = socket.read_some(boost::asio::buffer(buf), ec);
    EXPECT_NE(std::string(buf, n).find("400"), std::string::npos);
  }
  EXPECT_EQ(http_call(port, http::verb::delete_, "/api/jobs").status, 405);
  EXPECT_EQ(http_call(port, http::verb::get, "/api/jobs").status, 200);
}

// Found by fuzz/http_fuzz: a target with invalid UTF-8 made the error
// reply's JSON dump throw, and the exception ended the coordinator.
TEST_F(HttpApiTest, AnInvalidUtf8TargetGetsA404AndTheServerGoesOn) {
  start();
  int port = coordinator_->http_port();
  EXPECT_EQ(http_call(port, http::verb::get, "/\xca" "metrics").status, 404);
  EXPECT_EQ(http_call(port, http::verb::get, "/api/jobs").status, 200);
}

// Without a token the page is readable by anyone who reaches it: workers'
// last log lines (a printed password, say) are left out.
TEST_F(HttpApiTest, WithoutATokenWorkersLastLinesAreNotShown) {
  start();
  FakeAgent n(endpoint_, "node-1", 1);
  std::string id = submit(command_job("leaky", 1, 1));
  auto l = n.next_as<protocol::LaunchOrder>();
  ASSERT_TRUE(l);
  n.exit_all(*l, 3);  // last_lines: "boom from rank 0"
  ASSERT_TRUE(wait_for_state(id, "failed"));
  EXPECT_FALSE(job(id).root_cause.last_lines.empty());  // the CLI still has them
  auto page = http_call(coordinator_->http_port(), http::verb::get, "/api/jobs");
  EXPECT_EQ(page.status, 200);
  EXPECT_EQ(page.body.find("boom from rank"), std::string::npos) << page.body.substr(0, 400);
}

TEST_F(HttpApiTest, OffLoopbackWithoutATokenIsRefused) {
  CoordinatorOptions options;
  options.listen = "tcp://127.0.0.1:0";
  options.http_listen = "0.0.0.0:0";
  boost::asio::io_context io;
  auto c = Coordinator::start(io, options);
  ASSERT_FALSE(c);
  EXPECT_NE(c.status().message().find("without a token"), std::string::npos) << c.status().message();
}

}  // namespace
}  // namespace cohort::coordinator::testing
