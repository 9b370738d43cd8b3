// Per-client-key limits without sockets: the settings after a client key in
// authorized_clients (and their errors, at file:line), which limit holds for
// a key, how its owner is named, and the verdicts on usage.
#include "coordinator/key_limits.h"

#include <climits>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace cohort::coordinator {
namespace {

namespace fs = std::filesystem;

const std::string kAlice =
    "rq7Gk3xY-alice-0000000000000000000000000";  // 40 characters, as Z85 keys are
const std::string kBob = "Zt9wLp2Q-bob-000000000000000000000000000";

class ClientKeyLines : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/cohort-client-lines-XXXXXX";
    dir_ = ::mkdtemp(templ);
    ASSERT_TRUE(protocol::write_coordinator_keys(dir_));
  }
  void TearDown() override { fs::remove_all(dir_); }
  Result<protocol::Security> load(const std::string& lines) {
    std::ofstream(dir_ + "/authorized_clients") << "# client public keys\n" << lines;
    return protocol::load_server_security(dir_);
  }
  std::string dir_;
};

TEST_F(ClientKeyLines, CarryANameAndLimits) {
  auto s = load(kAlice + " name=alice max_gpus=16 max_queued=50\n" + kBob +
                " max_gpus=unlimited  # no cap\n");
  ASSERT_TRUE(s) << s.status().message();
  ASSERT_EQ(s->client_keys.count(kAlice), 1u);
  const auto& alice = s->client_keys.at(kAlice);
  EXPECT_EQ(alice.name, "alice");
  EXPECT_EQ(alice.max_gpus, 16);
  EXPECT_EQ(alice.max_queued, 50);
  const auto& bob = s->client_keys.at(kBob);
  EXPECT_EQ(bob.name, "");
  EXPECT_EQ(bob.max_gpus, protocol::ClientKeySettings::kNoLimit);
  EXPECT_FALSE(bob.max_queued.has_value());
  EXPECT_EQ(s->authorized_keys.at(kBob), protocol::Role::kClient);
}

TEST_F(ClientKeyLines, AnUnknownSettingOrABadValueIsNamedAtItsFileAndLine) {
  const std::string list = dir_ + "/authorized_clients";
  auto unknown = load(kAlice + " max_jobs=3\n");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.status().message(), list +
                                            ":2: unknown setting 'max_jobs=3' after a client key "
                                            "(name=NAME, max_gpus=N, max_queued=N)");
  auto negative = load(kAlice + " max_gpus=-3\n");
  ASSERT_FALSE(negative);
  EXPECT_EQ(negative.status().message(),
            list + ":2: max_gpus must be a number from 0 to 1000000 or 'unlimited', not '-3'");
  auto words = load("\n" + kAlice + " max_queued=lots\n");
  ASSERT_FALSE(words);
  EXPECT_NE(words.status().message().find(list + ":3: max_queued must be a number"),
            std::string::npos);
  auto name = load(kAlice + " name=al/ice\n");
  ASSERT_FALSE(name);
  EXPECT_NE(name.status().message().find("name must be 1 to 64 letters"), std::string::npos);
}

TEST_F(ClientKeyLines, KeygenWritesTheNameAndLimitsAfterTheKey) {
  protocol::ClientKeySettings settings{"carol", 8, protocol::ClientKeySettings::kNoLimit};
  ASSERT_TRUE(protocol::write_peer_keys(dir_ + "/carol", protocol::Role::kClient, dir_, {}, settings));
  auto s = protocol::load_server_security(dir_);
  ASSERT_TRUE(s) << s.status().message();
  ASSERT_EQ(s->client_keys.size(), 1u);
  const auto& carol = s->client_keys.begin()->second;
  EXPECT_EQ(carol.name, "carol");
  EXPECT_EQ(carol.max_gpus, 8);
  EXPECT_EQ(carol.max_queued, protocol::ClientKeySettings::kNoLimit);
  // Settings describe client keys that are being authorized.
  EXPECT_FALSE(protocol::write_peer_keys(dir_ + "/agent", protocol::Role::kAgent, dir_, {}, settings));
  EXPECT_FALSE(protocol::write_peer_keys(dir_ + "/alone", protocol::Role::kClient, "", {}, settings));
  EXPECT_FALSE(protocol::write_peer_keys(dir_ + "/bad", protocol::Role::kClient, dir_, {}, {"no name", {}, {}}));
}

TEST(KeyLimits, AKeysOwnLineOverridesTheDefaultsAndUnlimitedLiftsThem) {
  protocol::Security security;
  security.client_keys[kAlice] = {"alice", 4, std::nullopt};
  security.client_keys[kBob] = {"", protocol::ClientKeySettings::kNoLimit, 0};
  KeyLimits alice = limits_of_key(kAlice, security, 8, 10);
  EXPECT_EQ(alice.max_gpus, 4);
  EXPECT_EQ(alice.gpus_source, "max_gpus= on its line in authorized_clients");
  EXPECT_EQ(alice.max_queued, 10);
  EXPECT_EQ(alice.queued_source, "--max-queued-per-key");
  KeyLimits bob = limits_of_key(kBob, security, 8, 10);
  EXPECT_EQ(bob.max_gpus, KeyLimits::kNone);
  EXPECT_EQ(bob.max_queued, 0);
  // The local user (no CURVE) and unlisted keys get the defaults.
  EXPECT_EQ(limits_of_key("", security, 8, -1).max_gpus, 8);
  EXPECT_EQ(limits_of_key("", security, 8, -1).max_queued, KeyLimits::kNone);
  EXPECT_EQ(limits_of_key("another-key-0000000000000000000000000000", security, -1, 3).max_queued,
            3);
}

TEST(KeyLimits, OwnersAreNamedByTheirNameElseTheirKeysFirstCharacters) {
  protocol::Security security;
  security.client_keys[kAlice] = {"alice", std::nullopt, std::nullopt};
  EXPECT_EQ(owner_of_key(kAlice, security), "alice");
  EXPECT_EQ(owner_of_key(kBob, security), "Zt9wLp2Q-bob");
  EXPECT_EQ(owner_of_key("", security), "");
  EXPECT_EQ(describe_owner("alice"), "client key alice");
  EXPECT_EQ(describe_owner(""), "the local user");
}

TEST(KeyLimits, ASubmissionIsRefusedAtTheQueuedLimitOrWhenItCouldNeverStart) {
  KeyLimits limits;
  limits.max_gpus = 4;
  limits.max_queued = 2;
  limits.gpus_source = "--max-gpus-per-key";
  limits.queued_source = "--max-queued-per-key";
  EXPECT_TRUE(admit_for_key("alice", limits, {3, 1}, 4));
  Status full = admit_for_key("alice", limits, {0, 2}, 1);
  ASSERT_FALSE(full);
  EXPECT_NE(
      full.message().find("client key alice has 2 job(s) waiting in the queue; its limit is 2"),
      std::string::npos);
  Status too_big = admit_for_key("alice", limits, {0, 0}, 8);
  ASSERT_FALSE(too_big);
  EXPECT_NE(too_big.message().find("needs at least 8 GPU(s)"), std::string::npos)
      << too_big.message();
  EXPECT_TRUE(admit_for_key("", KeyLimits{}, {1000, 1000}, 1000));  // no limits
}

TEST(KeyLimits, NodesWithinTheGpuLimitCountWhatTheKeysJobsHold) {
  KeyLimits limits;
  limits.max_gpus = 8;
  EXPECT_EQ(nodes_within_gpu_limit(limits, {0, 0}, 2), 4);
  EXPECT_EQ(nodes_within_gpu_limit(limits, {3, 0}, 2), 2);  // 5 left: two nodes of 2
  EXPECT_EQ(nodes_within_gpu_limit(limits, {8, 0}, 1), 0);
  EXPECT_EQ(nodes_within_gpu_limit(limits, {9, 0}, 1), 0);  // over after the limit was lowered
  EXPECT_EQ(nodes_within_gpu_limit(KeyLimits{}, {100, 0}, 8), INT_MAX);
}

}  // namespace
}  // namespace cohort::coordinator
