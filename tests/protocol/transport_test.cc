// ROUTER/DEALER over real loopback sockets on an Asio loop, CURVE
// authentication, and the rule for when keys are required.
#include <atomic>
#include <filesystem>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <gtest/gtest.h>

#include "protocol/client.h"
#include "protocol/codec.h"
#include "protocol/transport.h"

namespace cohort::protocol {
namespace {

using namespace std::chrono_literals;

// An echo server on its own loop thread: replies to each request with an Ack
// carrying the request's type.
class EchoServer {
 public:
  explicit EchoServer(const Security& security = {}) {
    auto router = RouterEndpoint::bind(io_, make_zmq_context(), "tcp://127.0.0.1:0", security,
                                       [this](const std::string& peer, std::string payload, Role role) {
                                         last_role = role;
                                         auto e = decode(payload);
                                         if (!e) {
                                           (void)router_->send(peer, encode_error(e.status(), 0));
                                           return;
                                         }
                                         (void)router_->send(peer, encode(Ack{e->type}, e->id));
                                       });
    EXPECT_TRUE(router) << router.status().message();
    router_ = std::move(*router);
    thread_ = std::thread([this] {
      auto guard = boost::asio::make_work_guard(io_);
      io_.run();
    });
  }
  ~EchoServer() {
    io_.stop();
    thread_.join();
  }
  std::string endpoint() const { return router_->endpoint(); }
  std::atomic<Role> last_role{Role::kTrusted};

 private:
  boost::asio::io_context io_;
  std::unique_ptr<RouterEndpoint> router_;
  std::thread thread_;
};

TEST(Transport, RequestsAndRepliesPairById) {
  EchoServer server;
  auto client = Client::connect(server.endpoint(), {});
  ASSERT_TRUE(client);
  for (int i = 0; i < 20; ++i) {
    auto ack = (*client)->request<Ack>(NodeQuery{}, 5s);
    ASSERT_TRUE(ack) << ack.status().message();
    EXPECT_EQ(ack->text, "node_query");
  }
}

TEST(Transport, ADealerOnAnAsioLoopReceivesReplies) {
  EchoServer server;
  boost::asio::io_context io;
  std::vector<std::string> got;
  auto dealer = DealerEndpoint::connect(io, make_zmq_context(), server.endpoint(), {},
                                        [&](std::string payload) {
                                          got.push_back(payload);
                                          if (got.size() == 3) io.stop();
                                        });
  ASSERT_TRUE(dealer);
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE((*dealer)->send(encode(NodeQuery{}, i)));
  boost::asio::steady_timer guard(io, 5s);
  guard.async_wait([&](auto) { io.stop(); });
  io.run();
  ASSERT_EQ(got.size(), 3u);
  auto e = decode(got[2]);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->id, 3u);
}

TEST(Transport, NoReplyIsUnavailable) {
  auto client = Client::connect("tcp://127.0.0.1:1", {});
  ASSERT_TRUE(client);
  auto r = (*client)->request<Ack>(NodeQuery{}, 200ms);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
}

class CurveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/cohort-keys-XXXXXX";
    dir_ = ::mkdtemp(templ);
    ASSERT_TRUE(write_coordinator_keys(dir_ + "/cluster"));
    ASSERT_TRUE(write_peer_keys(dir_ + "/client", Role::kClient, dir_ + "/cluster"));
    ASSERT_TRUE(write_peer_keys(dir_ + "/agent", Role::kAgent, dir_ + "/cluster"));
    ASSERT_TRUE(write_peer_keys(dir_ + "/stranger", Role::kClient));  // never authorized
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(CurveTest, AnAuthorizedClientIsServedWithItsRole) {
  auto server_security = load_server_security(dir_ + "/cluster");
  ASSERT_TRUE(server_security) << server_security.status().message();
  EchoServer server(*server_security);
  for (auto [folder, role] : {std::pair{"client", Role::kClient}, std::pair{"agent", Role::kAgent}}) {
    auto security = load_client_security(dir_ + "/" + folder, role);
    ASSERT_TRUE(security) << security.status().message();
    auto client = Client::connect(server.endpoint(), *security);
    ASSERT_TRUE(client);
    auto ack = (*client)->request<Ack>(NodeQuery{}, 5s);
    EXPECT_TRUE(ack) << ack.status().message();
    EXPECT_EQ(server.last_role.load(), role) << folder;
  }
}

TEST_F(CurveTest, UnauthenticatedAndUnknownClientsAreRefused) {
  auto server_security = load_server_security(dir_ + "/cluster");
  ASSERT_TRUE(server_security);
  EchoServer server(*server_security);
  // No keys at all: the CURVE handshake never completes.
  auto plain = Client::connect(server.endpoint(), {});
  ASSERT_TRUE(plain);
  EXPECT_FALSE((*plain)->request<Ack>(NodeQuery{}, 500ms));
  // A well-formed key pair the coordinator was never given.
  Security stranger;
  stranger.enabled = true;
  auto pair = generate_key_pair();
  ASSERT_TRUE(pair);
  stranger.own = *pair;
  stranger.server_public_key = server_security->own.public_key;
  auto client = Client::connect(server.endpoint(), stranger);
  ASSERT_TRUE(client);
  auto refused = (*client)->request<Ack>(NodeQuery{}, 2s);
  ASSERT_FALSE(refused);
  // Said plainly, not "is it running?".
  EXPECT_NE(refused.status().message().find("refused this client's key"), std::string::npos)
      << refused.status().message();
}

TEST_F(CurveTest, KeygenRefusesToOverwriteKeysAndKeepsRolesApart) {
  auto s = write_coordinator_keys(dir_ + "/cluster");
  EXPECT_FALSE(s);
  EXPECT_NE(s.message().find("already holds keys"), std::string::npos);
  EXPECT_FALSE(write_peer_keys(dir_ + "/client", Role::kClient, dir_ + "/cluster"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/client/server.secret"));
  EXPECT_FALSE(load_client_security(dir_ + "/client", Role::kAgent));
  auto server = load_server_security(dir_ + "/cluster");
  ASSERT_TRUE(server);
  EXPECT_EQ(server->authorized_keys.size(), 2u);
}

TEST(Security, LoopbackNeedsNoKeysAnythingElseDoes) {
  EXPECT_TRUE(is_loopback_endpoint("tcp://127.0.0.1:7070"));
  EXPECT_TRUE(is_loopback_endpoint("tcp://localhost:7070"));
  EXPECT_TRUE(is_loopback_endpoint("tcp://[::1]:7070"));
  EXPECT_TRUE(is_loopback_endpoint("ipc:///tmp/x.sock"));
  EXPECT_FALSE(is_loopback_endpoint("tcp://0.0.0.0:7070"));
  EXPECT_FALSE(is_loopback_endpoint("tcp://10.1.2.3:7070"));
  EXPECT_FALSE(is_loopback_endpoint("tcp://*:7070"));
  // Parsed, not matched by prefix.
  EXPECT_FALSE(is_loopback_endpoint("tcp://127.invalid:7070"));
  EXPECT_FALSE(is_loopback_endpoint("tcp://127.0.0.1.example.com:7070"));
  EXPECT_TRUE(is_loopback_endpoint("tcp://127.1.2.3:7070"));
  EXPECT_FALSE(is_loopback_endpoint("tcp://[::2]:7070"));
  EXPECT_FALSE(check_bind_allowed("tcp://127.invalid:7070", {}, false));
  EXPECT_TRUE(check_bind_allowed("tcp://127.0.0.1:7070", {}, false));
  Status refused = check_bind_allowed("tcp://0.0.0.0:7070", {}, false);
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(refused.message().find("cohort keygen"), std::string::npos);
  EXPECT_TRUE(check_bind_allowed("tcp://0.0.0.0:7070", {}, true));
  Security keys;
  keys.enabled = true;
  EXPECT_TRUE(check_bind_allowed("tcp://0.0.0.0:7070", keys, false));
}

}  // namespace
}  // namespace cohort::protocol
