// The inference server's HTTP front under slow clients (issue 34, item 6):
// 300 connections that send one byte and then nothing (more than
// max_connections, from the health check's own address) do not keep
// /health out, with an API key set. No model: a queue that takes nothing.
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio.hpp>

#include "infer/serve/serve_http.h"
#include "tests/infer/idle_queue.h"

namespace cohort::infer {
namespace {

using namespace std::chrono_literals;
using tcp = boost::asio::ip::tcp;

using testing::IdleQueue;

// "HTTP/1.1 200 OK..." → 200; 0 when the server closed without answering.
int get_status(int port, const std::string& target) {
  boost::asio::io_context io;
  tcp::socket s(io);
  s.connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), uint16_t(port)));
  std::string request = "GET " + target + " HTTP/1.1\r\nHost: localhost\r\n\r\n";
  boost::asio::write(s, boost::asio::buffer(request));
  std::string reply;
  boost::system::error_code ec;
  boost::asio::read(s, boost::asio::dynamic_buffer(reply), boost::asio::transfer_at_least(12), ec);
  if (reply.size() < 12) return 0;
  return std::stoi(reply.substr(9, 3));
}

TEST(ServeHttpSlowClients, SlowConnectionsDoNotStarveHealth) {
  IdleQueue queue;
  ServeMetrics metrics;
  ServeHttpOptions options;
  options.api_key = "k";
  options.max_connections = 64;
  options.max_connections_per_address = 32;
  auto server = ServeHttp::start(options, &queue, &metrics);
  ASSERT_TRUE(server) << server.status().message();
  (*server)->set_state(ServeState::kReady);
  int port = (*server)->port();
  boost::asio::io_context io;
  std::vector<std::unique_ptr<tcp::socket>> slow;
  for (int i = 0; i < 300; ++i) {
    auto s = std::make_unique<tcp::socket>(io);
    s->connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), uint16_t(port)));
    boost::asio::write(*s, boost::asio::buffer("P", 1));
    slow.push_back(std::move(s));
  }
  std::this_thread::sleep_for(200ms);
  for (int i = 0; i < 5; ++i) {
    auto began = std::chrono::steady_clock::now();
    EXPECT_EQ(get_status(port, "/health"), 200) << "attempt " << i;
    EXPECT_LT(std::chrono::steady_clock::now() - began, 2s) << "attempt " << i;
  }
}

}  // namespace
}  // namespace cohort::infer
