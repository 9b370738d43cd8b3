// Agent keys bound to node names (issue 34, item 7), over real CURVE
// sockets: first use binds, a lost node's name stays with its key (also
// across a coordinator restart), `cohort nodes rm` unbinds, and a key
// restricted at keygen registers only its names.
#include <filesystem>
#include <fstream>

#include "fake_agent.h"
#include "protocol/security.h"

namespace cohort::coordinator::testing {
namespace {

namespace fs = std::filesystem;

class NodeKeysTest : public CoordinatorTest {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/cohort-node-keys-XXXXXX";
    dir_ = ::mkdtemp(templ);
    ASSERT_TRUE(protocol::write_coordinator_keys(dir_ + "/coord"));
    for (const char* a : {"a1", "a2"}) {
      ASSERT_TRUE(
          protocol::write_peer_keys(dir_ + "/" + a, protocol::Role::kAgent, dir_ + "/coord"));
    }
    ASSERT_TRUE(protocol::write_peer_keys(dir_ + "/pinned", protocol::Role::kAgent, dir_ + "/coord",
                                          {"node-p"}));
    ASSERT_TRUE(
        protocol::write_peer_keys(dir_ + "/client", protocol::Role::kClient, dir_ + "/coord"));
    auto server = protocol::load_server_security(dir_ + "/coord");
    ASSERT_TRUE(server) << server.status().message();
    configure_ = [security = *server](CoordinatorOptions& o) { o.security = security; };
  }
  void TearDown() override {
    stop();
    fs::remove_all(dir_);
  }
  std::unique_ptr<protocol::Client> peer(const std::string& folder,
                                         protocol::Role role = protocol::Role::kAgent) {
    auto security = protocol::load_client_security(dir_ + "/" + folder, role);
    EXPECT_TRUE(security) << security.status().message();
    auto client = protocol::Client::connect(endpoint_, *security);
    EXPECT_TRUE(client);
    return std::move(*client);
  }
  static protocol::RegisterNode reg(const std::string& node) {
    return protocol::RegisterNode{node, "10.0.0.2", {{0, "u", "p", "n", 1}}, {}};
  }
  std::string node_state(protocol::Client& asker, const std::string& node) {
    auto r = asker.request<protocol::NodeList>(protocol::NodeQuery{}, 5s);
    if (!r) return "";
    for (const auto& n : r->nodes) {
      if (n.name == node) return n.state;
    }
    return "";
  }
  std::string dir_;
};

TEST_F(NodeKeysTest, ALostNodesNameCannotBeTakenByAnotherKeyUntilRemoved) {
  std::string state = dir_ + "/state";
  start(state);
  auto a1 = peer("a1");
  auto a2 = peer("a2");
  ASSERT_TRUE(a1->request<protocol::RegisterAck>(reg("node-b"), 5s));
  clock_.advance(4s);  // past heartbeat_timeout: node-b is lost
  ASSERT_TRUE(wait_until([&] { return node_state(*a2, "node-b") == "lost"; }));
  auto taken = a2->request<protocol::RegisterAck>(reg("node-b"), 5s);
  ASSERT_FALSE(taken);
  EXPECT_EQ(taken.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(taken.status().message().find("bound to another agent key"), std::string::npos)
      << taken.status().message();
  // A name of its own is fine; its first use binds it.
  EXPECT_TRUE(a2->request<protocol::RegisterAck>(reg("node-c"), 5s));

  // The binding is in the state database.
  stop();
  start(state);
  a2 = peer("a2");
  taken = a2->request<protocol::RegisterAck>(reg("node-b"), 5s);
  ASSERT_FALSE(taken);
  EXPECT_EQ(taken.status().code(), StatusCode::kPermissionDenied);

  // `cohort nodes rm` unbinds the lost node's name.
  auto client = peer("client", protocol::Role::kClient);
  auto removed = client->request<protocol::Ack>(protocol::RemoveNode{"node-b"}, 5s);
  ASSERT_TRUE(removed) << removed.status().message();
  EXPECT_TRUE(a2->request<protocol::RegisterAck>(reg("node-b"), 5s));
}

TEST_F(NodeKeysTest, ItsOwnKeyTakesALostNodeBack) {
  start();
  auto a1 = peer("a1");
  ASSERT_TRUE(a1->request<protocol::RegisterAck>(reg("node-a"), 5s));
  clock_.advance(4s);
  ASSERT_TRUE(wait_until([&] { return node_state(*a1, "node-a") == "lost"; }));
  auto again = peer("a1");  // a restarted agent: a new connection, the same key
  EXPECT_TRUE(again->request<protocol::RegisterAck>(reg("node-a"), 5s));
}

TEST_F(NodeKeysTest, AKeyRestrictedAtKeygenRegistersOnlyItsNames) {
  start();
  auto pinned = peer("pinned");
  auto other = pinned->request<protocol::RegisterAck>(reg("node-q"), 5s);
  ASSERT_FALSE(other);
  EXPECT_EQ(other.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(other.status().message().find("may register only node(s) node-p"), std::string::npos)
      << other.status().message();
  EXPECT_TRUE(pinned->request<protocol::RegisterAck>(reg("node-p"), 5s));
  std::string list = [&] {
    std::ifstream in(dir_ + "/coord/authorized_agents");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  EXPECT_NE(list.find(" nodes=node-p\n"), std::string::npos) << list;
}

TEST_F(NodeKeysTest, SecretKeysAre0600AndKeyFolders0700) {
  auto mode = [](const std::string& p) { return fs::status(p).permissions() & fs::perms::all; };
  EXPECT_EQ(mode(dir_ + "/coord/server.secret"), fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(mode(dir_ + "/a1/agent.secret"), fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(mode(dir_ + "/client/client.secret"), fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(mode(dir_ + "/coord"), fs::perms::owner_all);
  EXPECT_EQ(mode(dir_ + "/a1"), fs::perms::owner_all);
}

}  // namespace
}  // namespace cohort::coordinator::testing
