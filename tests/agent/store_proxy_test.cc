// The agent's store port under hostile peers (issue 19): announced frame
// sizes are refused before anything is allocated, connections are capped
// (one thread each), the attempt's token is required, and an oversized set
// gets an error at once instead of waiting out its timeout.
#include "agent/store_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "collective/store/tcp_store.h"
#include "collective/store/tcp_store_protocol.h"

namespace cohort::agent {
namespace {

using namespace std::chrono_literals;

// A coordinator stand-in: answers every request at once.
StoreForward echo_forward(std::atomic<int>* forwarded, std::string* last_token = nullptr) {
  return [forwarded, last_token](protocol::StoreRequest r, std::function<void(Result<protocol::StoreReply>)> done) {
    ++*forwarded;
    if (last_token) *last_token = r.token;
    protocol::StoreReply reply;
    reply.found = true;
    reply.value.assign(1, r.op == "add" ? '1' : 'v');
    done(reply);
  };
}

int connect_raw(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

int port_of(const StoreProxy& proxy) {
  std::string host;
  int port = 0;
  EXPECT_TRUE(store::parse_tcp_address(proxy.address(), &host, &port));
  return port;
}

size_t thread_count() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoul(line.substr(8));
  }
  return 0;
}

TEST(StoreProxy, AnAnnouncedHugeFrameIsRefusedBeforeAllocating) {
  std::atomic<int> forwarded{0};
  auto proxy = StoreProxy::start("job-1", 0, echo_forward(&forwarded));
  ASSERT_TRUE(proxy);
  int fd = connect_raw(port_of(**proxy));
  store::wire::Writer header;
  header.u32(256u << 20);  // announces 256 MiB, sends nothing more
  ASSERT_EQ(::send(fd, header.bytes().data(), 4, 0), 4);
  auto reply = store::wire::read_frame(fd, std::chrono::steady_clock::now() + 5s);
  ASSERT_TRUE(reply) << reply.status().message();
  store::wire::Reader r(*reply);
  EXPECT_EQ(StatusCode(r.u8()), StatusCode::kInvalidArgument);
  EXPECT_NE(r.str().find("exceeds"), std::string::npos);
  char byte;
  EXPECT_EQ(::recv(fd, &byte, 1, 0), 0) << "the connection is closed after the refusal";
  ::close(fd);
  EXPECT_EQ(forwarded.load(), 0);
}

TEST(StoreProxy, ConnectionsAreCappedSoThreadsAre) {
  std::atomic<int> forwarded{0};
  auto proxy = StoreProxy::start("job-1", 0, echo_forward(&forwarded));
  ASSERT_TRUE(proxy);
  size_t before = thread_count();
  std::vector<int> fds;
  for (int i = 0; i < 500; ++i) fds.push_back(connect_raw(port_of(**proxy)));
  std::this_thread::sleep_for(500ms);
  size_t during = thread_count();
  EXPECT_LE(during, before + 70) << "500 idle connections made " << during - before << " threads";
  for (int fd : fds) ::close(fd);
}

TEST(StoreProxy, WorkersNeedTheAttemptsTokenAndItGoesUpstream) {
  std::atomic<int> forwarded{0};
  std::string token_seen;
  auto proxy = StoreProxy::start("job-1", 0, echo_forward(&forwarded, &token_seen), "127.0.0.1", nullptr,
                                 "s3cret");
  ASSERT_TRUE(proxy);
  int port = port_of(**proxy);
  auto anonymous = store::TcpStoreClient::connect("127.0.0.1", port);
  ASSERT_TRUE(anonymous);
  auto refused = (*anonymous)->set("k", "v");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied) << refused.message();
  store::TcpStoreClientOptions wrong;
  wrong.token = "guess";
  EXPECT_FALSE(store::TcpStoreClient::connect("127.0.0.1", port, wrong));
  store::TcpStoreClientOptions right;
  right.token = "s3cret";
  auto client = store::TcpStoreClient::connect("127.0.0.1", port, right);
  ASSERT_TRUE(client) << client.status().message();
  EXPECT_TRUE((*client)->set("k", "v"));
  EXPECT_EQ(token_seen, "s3cret");
  EXPECT_EQ(forwarded.load(), 1);
}

TEST(StoreProxy, AnOversizedSetFailsAtOnce) {
  std::atomic<int> forwarded{0};
  auto proxy = StoreProxy::start("job-1", 0, echo_forward(&forwarded));
  ASSERT_TRUE(proxy);
  auto client = store::TcpStoreClient::connect("127.0.0.1", port_of(**proxy));
  ASSERT_TRUE(client);
  auto started = std::chrono::steady_clock::now();
  auto s = (*client)->set("big", std::string(10 << 20, 'x'));
  EXPECT_FALSE(s);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 10s);
  EXPECT_EQ(forwarded.load(), 0);
  auto again = store::TcpStoreClient::connect("127.0.0.1", port_of(**proxy));
  ASSERT_TRUE(again);
  auto fits = (*again)->set("small", std::string(1 << 20, 'x'));
  EXPECT_TRUE(fits) << fits.message();
}

}  // namespace
}  // namespace cohort::agent
