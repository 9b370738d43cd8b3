// A prompt's cost is paid off the HTTP thread (issue 34, item 1): a 1 MB
// prompt that is one long word is answered within two seconds, and /health
// keeps answering within 100 ms while it is tokenized. No model: a queue
// that takes nothing, and a context too small for the prompt, so the answer
// is the 400 that names its token count once tokenization has finished.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <boost/asio.hpp>

#include "../data/data_fixture.h"
#include "infer/serve/serve_http.h"
#include "tests/infer/idle_queue.h"

namespace cohort::infer {
namespace {

using namespace std::chrono_literals;
using tcp = boost::asio::ip::tcp;
using Clock = std::chrono::steady_clock;

using testing::IdleQueue;

// The whole reply to one request (the server closes after it).
std::string exchange(int port, const std::string& request) {
  boost::asio::io_context io;
  tcp::socket s(io);
  s.connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), uint16_t(port)));
  boost::asio::write(s, boost::asio::buffer(request));
  std::string reply;
  boost::system::error_code ec;
  boost::asio::read(s, boost::asio::dynamic_buffer(reply), ec);
  return reply;
}

TEST(ServeHttpLargePrompt, AOneMegabyteWordIsAnsweredWhileHealthKeepsAnswering) {
  IdleQueue queue;
  ServeMetrics metrics;
  ServeHttpOptions options;
  options.max_body_bytes = 2 << 20;
  auto tokenizer = text::BpeTokenizer::from_json(testing::test_tokenizer_json());
  ASSERT_TRUE(tokenizer.is_ok());
  options.tokenizer = std::shared_ptr<text::Tokenizer>(std::move(*tokenizer));
  options.defaults.model_name = "m";
  options.defaults.vocab_size = options.tokenizer->vocab_size();
  options.defaults.context = 4096;
  auto server = ServeHttp::start(options, &queue, &metrics);
  ASSERT_TRUE(server) << server.status().message();
  (*server)->set_state(ServeState::kReady);
  const int port = (*server)->port();

  std::string word(size_t(1) << 20, 'h');
  for (size_t i = 1; i < word.size(); i += 3) word[i] = 'e';
  const std::string body = "{\"model\": \"m\", \"prompt\": \"" + word + "\", \"max_tokens\": 1}";
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  std::atomic<bool> done{false};
  std::string reply;
  double answered_after = 0;
  std::thread client([&] {
    const auto began = Clock::now();
    reply = exchange(port, request);
    answered_after = std::chrono::duration<double>(Clock::now() - began).count();
    done = true;
  });
  double slowest_health = 0;
  int health_checks = 0;
  while (!done) {
    const auto began = Clock::now();
    const std::string health = exchange(port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    slowest_health = std::max(slowest_health, std::chrono::duration<double>(Clock::now() - began).count());
    EXPECT_EQ(health.substr(9, 3), "200");
    ++health_checks;
    std::this_thread::sleep_for(20ms);
  }
  client.join();
  EXPECT_EQ(reply.substr(9, 3), "400") << reply.substr(0, 300);
  EXPECT_NE(reply.find("tokens; this server's context is 4096"), std::string::npos) << reply.substr(0, 300);
  EXPECT_LT(answered_after, 2.0);
  EXPECT_GT(health_checks, 0);
  EXPECT_LT(slowest_health, 0.1) << health_checks << " health checks";
}

}  // namespace
}  // namespace cohort::infer
