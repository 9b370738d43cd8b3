// The rendezvous store: the in-memory backend, the TCP server and client
// over loopback, prefixes, and a backend that answers from another thread
// (as the agent's proxy to the coordinator does).
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <thread>

#include "collective/store/tcp_store.h"
#include "collective/store/tcp_store_protocol.h"

namespace cohort::store {
namespace {

using namespace std::chrono_literals;

void exercise(Store& s) {
  ASSERT_TRUE(s.set("a", std::string("x\0y", 3)).is_ok());
  auto a = s.get("a", 1s);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(*a, std::string("x\0y", 3));
  EXPECT_EQ(*s.add("n", 5), 5);
  EXPECT_EQ(*s.add("n", -2), 3);
  EXPECT_EQ(*s.get("n", 1s), "3");
  EXPECT_EQ(s.add("a", 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(s.wait({"a", "n"}, 1s).is_ok());
  auto missing = s.get("missing", 100ms);
  EXPECT_EQ(missing.status().code(), StatusCode::kTimeout);
  EXPECT_NE(missing.status().message().find("'missing'"), std::string::npos);
  EXPECT_EQ(s.wait({"a", "nope"}, 100ms).code(), StatusCode::kTimeout);
}

TEST(MemoryStore, SetsGetsAddsAndTimesOut) {
  auto s = make_memory_store();
  exercise(*s);
}

TEST(MemoryStore, BlockedGetWakesWhenAnotherThreadSets) {
  auto s = make_memory_store();
  auto later = std::async(std::launch::async, [&] { return s->get("k", 5s); });
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(s->set("k", "v").is_ok());
  auto v = later.get();
  ASSERT_TRUE(v.is_ok());
  EXPECT_EQ(*v, "v");
}

TEST(PrefixStore, KeepsNamespacesApart) {
  auto base = make_memory_store();
  PrefixStore a(base, "job1"), b(base, "job2");
  ASSERT_TRUE(a.set("k", "1").is_ok());
  EXPECT_EQ(b.get("k", 50ms).status().code(), StatusCode::kTimeout);
  EXPECT_EQ(*base->get("job1/k", 50ms), "1");
}

TEST(TcpStore, ServesEveryOperationOverLoopback) {
  auto server = TcpStoreServer::start(std::make_shared<MemoryStoreBackend>(), {});
  ASSERT_TRUE(server.is_ok()) << server.status().to_string();
  auto client = TcpStoreClient::connect("127.0.0.1", (*server)->port());
  ASSERT_TRUE(client.is_ok()) << client.status().to_string();
  exercise(**client);
}

TEST(TcpStore, BlockingGetIsAnsweredWhenAnotherClientSets) {
  auto server = TcpStoreServer::start(std::make_shared<MemoryStoreBackend>(), {});
  ASSERT_TRUE(server.is_ok());
  auto reader = TcpStoreClient::connect("127.0.0.1", (*server)->port());
  auto writer = TcpStoreClient::connect("127.0.0.1", (*server)->port());
  ASSERT_TRUE(reader.is_ok() && writer.is_ok());
  auto later = std::async(std::launch::async, [&] { return (*reader)->get("id", 5s); });
  std::this_thread::sleep_for(100ms);
  ASSERT_TRUE((*writer)->set("id", "nccl-unique-id").is_ok());
  auto v = later.get();
  ASSERT_TRUE(v.is_ok()) << v.status().to_string();
  EXPECT_EQ(*v, "nccl-unique-id");
}

TEST(TcpStore, ConcurrentAddsFromManyClientsAreAtomic) {
  auto server = TcpStoreServer::start(std::make_shared<MemoryStoreBackend>(), {});
  ASSERT_TRUE(server.is_ok());
  constexpr int kClients = 8, kAdds = 50;
  std::vector<std::future<bool>> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.push_back(std::async(std::launch::async, [&, c] {
      auto client = TcpStoreClient::connect("127.0.0.1", (*server)->port());
      if (!client.is_ok()) return false;
      for (int i = 0; i < kAdds; ++i) {
        if (!(*client)->add("counter", 1).is_ok()) return false;
      }
      // Everyone waits for the last add: a barrier through the store.
      if (!(*client)->set("done/" + std::to_string(c), "").is_ok()) return false;
      std::vector<std::string> keys;
      for (int k = 0; k < kClients; ++k) keys.push_back("done/" + std::to_string(k));
      return (*client)->wait(keys, 10s).is_ok();
    }));
  }
  for (auto& c : clients) EXPECT_TRUE(c.get());
  auto client = TcpStoreClient::connect("127.0.0.1", (*server)->port());
  ASSERT_TRUE(client.is_ok());
  EXPECT_EQ(*(*client)->get("counter", 1s), std::to_string(kClients * kAdds));
}

TEST(TcpStore, ClientRetriesUntilTheServerListens) {
  int port = 0;
  {
    auto probe = TcpStoreServer::start(std::make_shared<MemoryStoreBackend>(), {});
    ASSERT_TRUE(probe.is_ok());
    port = (*probe)->port();
  }
  auto client =
      std::async(std::launch::async, [&] { return TcpStoreClient::connect("127.0.0.1", port); });
  std::this_thread::sleep_for(200ms);
  TcpStoreServerOptions o;
  o.port = port;
  auto server = TcpStoreServer::start(std::make_shared<MemoryStoreBackend>(), o);
  ASSERT_TRUE(server.is_ok()) << server.status().to_string();
  auto c = client.get();
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_TRUE((*c)->set("k", "v").is_ok());
}

TEST(TcpStore, ConnectFailsWithinItsTimeoutWhenNothingListens) {
  TcpStoreClientOptions o;
  o.connect_timeout = 200ms;
  auto c = TcpStoreClient::connect("127.0.0.1", 1, o);
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
}

TEST(TcpStore, OversizedFrameGetsTheConnectionDroppedNotTheServer) {
  auto server = TcpStoreServer::start(std::make_shared<MemoryStoreBackend>(), {});
  ASSERT_TRUE(server.is_ok());
  auto fd =
      wire::connect_tcp("127.0.0.1", (*server)->port(), std::chrono::steady_clock::now() + 5s);
  ASSERT_TRUE(fd.is_ok());
  const unsigned char huge[4] = {0xff, 0xff, 0xff, 0xff};
  ASSERT_EQ(::send(*fd, huge, 4, MSG_NOSIGNAL), 4);
  // The server says why, then closes (a worker's oversized set learns at once).
  auto reply = wire::read_frame(*fd, std::chrono::steady_clock::now() + 5s);
  ASSERT_TRUE(reply.is_ok()) << reply.status().message();
  wire::Reader r(*reply);
  EXPECT_EQ(StatusCode(r.u8()), StatusCode::kInvalidArgument);
  auto after = wire::read_frame(*fd, std::chrono::steady_clock::now() + 5s);
  EXPECT_EQ(after.status().code(), StatusCode::kUnavailable);  // closed by the server
  ::close(*fd);
  auto client = TcpStoreClient::connect("127.0.0.1", (*server)->port());
  ASSERT_TRUE(client.is_ok());
  EXPECT_TRUE((*client)->set("still", "serving").is_ok());
}

TEST(TcpStore, UnknownOpcodeGetsAnErrorReply) {
  auto server = TcpStoreServer::start(std::make_shared<MemoryStoreBackend>(), {});
  ASSERT_TRUE(server.is_ok());
  auto fd =
      wire::connect_tcp("127.0.0.1", (*server)->port(), std::chrono::steady_clock::now() + 5s);
  ASSERT_TRUE(fd.is_ok());
  auto deadline = std::chrono::steady_clock::now() + 5s;
  ASSERT_TRUE(wire::write_frame(*fd, std::string("\x63", 1), deadline).is_ok());
  auto reply = wire::read_frame(*fd, deadline);
  ASSERT_TRUE(reply.is_ok());
  wire::Reader r(*reply);
  EXPECT_EQ(static_cast<StatusCode>(r.u8()), StatusCode::kInvalidArgument);
  EXPECT_NE(r.str().find("malformed"), std::string::npos);
  ::close(*fd);
}

// A backend that answers every request later, from its own thread: the
// shape of the agent's proxy, which waits for the coordinator.
class DeferredBackend final : public StoreBackend {
 public:
  ~DeferredBackend() override {
    for (auto& t : threads_) t.join();
  }
  void set(const std::string& key, std::string value, Done done) override {
    later([=, this] { inner_.set(key, value, done); });
  }
  void get(const std::string& key, Milliseconds timeout, ValueDone done) override {
    later([=, this] { inner_.get(key, timeout, done); });
  }
  void add(const std::string& key, int64_t delta, AddDone done) override {
    later([=, this] { inner_.add(key, delta, done); });
  }
  void wait(std::vector<std::string> keys, Milliseconds timeout, Done done) override {
    later([=, this] { inner_.wait(keys, timeout, done); });
  }

 private:
  void later(std::function<void()> f) {
    std::lock_guard lock(mu_);
    threads_.emplace_back([f = std::move(f)] {
      std::this_thread::sleep_for(10ms);
      f();
    });
  }
  MemoryStoreBackend inner_;
  std::mutex mu_;
  std::vector<std::thread> threads_;
};

TEST(TcpStore, ServesABackendThatAnswersAsynchronously) {
  auto backend = std::make_shared<DeferredBackend>();
  auto server = TcpStoreServer::start(backend, {});
  ASSERT_TRUE(server.is_ok());
  auto client = TcpStoreClient::connect("127.0.0.1", (*server)->port());
  ASSERT_TRUE(client.is_ok());
  exercise(**client);
}

TEST(TcpStoreAddress, ParsesAndRejects) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(parse_tcp_address("tcp://10.0.0.1:29500", &host, &port).is_ok());
  EXPECT_EQ(host, "10.0.0.1");
  EXPECT_EQ(port, 29500);
  ASSERT_TRUE(parse_tcp_address("[::1]:80", &host, &port).is_ok());
  EXPECT_EQ(host, "::1");
  EXPECT_FALSE(parse_tcp_address("tcp://host", &host, &port).is_ok());
  EXPECT_FALSE(parse_tcp_address("tcp://host:99999", &host, &port).is_ok());
}

}  // namespace
}  // namespace cohort::store
