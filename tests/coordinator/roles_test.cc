// Keys with roles over real CURVE sockets: a client key cannot register a
// node, an agent key cannot submit, and keygen keeps the server secret in
// the coordinator's folder.
#include <filesystem>

#include "fake_agent.h"
#include "protocol/security.h"

namespace cohort::coordinator::testing {
namespace {

namespace fs = std::filesystem;

class RolesTest : public CoordinatorTest {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/cohort-roles-XXXXXX";
    dir_ = ::mkdtemp(templ);
    ASSERT_TRUE(protocol::write_coordinator_keys(dir_ + "/coord"));
    ASSERT_TRUE(protocol::write_peer_keys(dir_ + "/agent", protocol::Role::kAgent, dir_ + "/coord"));
    ASSERT_TRUE(protocol::write_peer_keys(dir_ + "/client", protocol::Role::kClient, dir_ + "/coord"));
    auto server = protocol::load_server_security(dir_ + "/coord");
    ASSERT_TRUE(server) << server.status().message();
    configure_ = [security = *server](CoordinatorOptions& o) { o.security = security; };
  }
  void TearDown() override {
    stop();
    fs::remove_all(dir_);
  }
  std::unique_ptr<protocol::Client> peer(const std::string& folder, protocol::Role role) {
    auto security = protocol::load_client_security(dir_ + "/" + folder, role);
    EXPECT_TRUE(security) << security.status().message();
    auto client = protocol::Client::connect(endpoint_, *security);
    EXPECT_TRUE(client);
    return std::move(*client);
  }
  std::string dir_;
};

TEST_F(RolesTest, AClientKeyCannotRegisterANodeAndAnAgentKeyCannotSubmit) {
  start();
  auto client = peer("client", protocol::Role::kClient);
  auto agent = peer("agent", protocol::Role::kAgent);
  protocol::RegisterNode reg{"n1", "10.0.0.1", {{0, "u", "p", "n", 1}}, {}};
  auto as_client = client->request<protocol::RegisterAck>(reg, 5s);
  ASSERT_FALSE(as_client);
  EXPECT_EQ(as_client.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(as_client.status().message().find("needs an agent key"), std::string::npos);
  auto as_agent = agent->request<protocol::RegisterAck>(reg, 5s);
  EXPECT_TRUE(as_agent) << as_agent.status().message();
  auto submit_as_agent = agent->request<protocol::SubmitReply>(submit_of(command_job("j", 1, 1)), 5s);
  ASSERT_FALSE(submit_as_agent);
  EXPECT_EQ(submit_as_agent.status().code(), StatusCode::kPermissionDenied);
  auto submitted = client->request<protocol::SubmitReply>(submit_of(command_job("j", 1, 1)), 5s);
  EXPECT_TRUE(submitted) << submitted.status().message();
  // Both roles may ask.
  EXPECT_TRUE(agent->request<protocol::NodeList>(protocol::NodeQuery{}, 5s));
  EXPECT_TRUE(client->request<protocol::NodeList>(protocol::NodeQuery{}, 5s));
}

TEST_F(RolesTest, PeerFoldersHoldNoServerSecret) {
  for (const char* folder : {"agent", "client"}) {
    EXPECT_FALSE(fs::exists(dir_ + "/" + folder + "/server.secret")) << folder;
    EXPECT_TRUE(fs::exists(dir_ + "/" + folder + "/server.public")) << folder;
  }
  EXPECT_TRUE(fs::exists(dir_ + "/coord/server.secret"));
  // An agent folder has no client key, and the other way round.
  EXPECT_FALSE(protocol::load_client_security(dir_ + "/agent", protocol::Role::kClient));
  EXPECT_FALSE(protocol::load_client_security(dir_ + "/client", protocol::Role::kAgent));
}

}  // namespace
}  // namespace cohort::coordinator::testing
