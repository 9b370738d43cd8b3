// Addresses as typed: bare HOST:PORT becomes tcp://, everything ZeroMQ
// would refuse with "Invalid argument" is refused here with a hint.
#include "cli/coordinator_address.h"

#include <cstdlib>

#include <gtest/gtest.h>

namespace cohort::cli {
namespace {

std::string normalized(const std::string& text) {
  auto r = normalize_endpoint(text, "--coordinator");
  return r ? *r : "error: " + r.status().message();
}

TEST(CoordinatorAddress, ABareHostAndPortIsTakenAsTcp) {
  EXPECT_EQ(normalized("10.0.0.1:7070"), "tcp://10.0.0.1:7070");
  EXPECT_EQ(normalized("head-node:7070"), "tcp://head-node:7070");
  EXPECT_EQ(normalized("[::1]:7070"), "tcp://[::1]:7070");
  EXPECT_EQ(normalized("0.0.0.0:*"), "tcp://0.0.0.0:*");
}

TEST(CoordinatorAddress, WellFormedEndpointsPassUnchanged) {
  EXPECT_EQ(normalized("tcp://10.0.0.1:7070"), "tcp://10.0.0.1:7070");
  EXPECT_EQ(normalized("tcp://127.0.0.1:0"), "tcp://127.0.0.1:0");
  EXPECT_EQ(normalized("ipc:///tmp/cohort.sock"), "ipc:///tmp/cohort.sock");
  EXPECT_EQ(normalized("inproc://x"), "inproc://x");
}

TEST(CoordinatorAddress, AMissingPortIsRefusedWithTheFormToUse) {
  EXPECT_EQ(normalized("10.0.0.1"),
            "error: --coordinator '10.0.0.1' has no port; write tcp://HOST:PORT, e.g. "
            "tcp://10.0.0.1:7070");
  EXPECT_EQ(
      normalized("tcp://10.0.0.1"),
      "error: --coordinator 'tcp://10.0.0.1' is not tcp://HOST:PORT, e.g. tcp://10.0.0.1:7070");
  EXPECT_NE(normalized("tcp://h:99999").find("is not tcp://HOST:PORT"), std::string::npos);
  EXPECT_NE(normalized("h:70a0").find("has no port"), std::string::npos);
}

TEST(CoordinatorAddress, OtherSchemesAndPathsGetAHint) {
  EXPECT_NE(normalized("http://h:8080").find("not http://"), std::string::npos);
  EXPECT_NE(normalized("/tmp/cohort.sock").find("ipc:///tmp/cohort.sock"), std::string::npos);
  EXPECT_NE(normalized("ipc://").find("needs a name"), std::string::npos);
  EXPECT_NE(normalized("").find("--coordinator is empty"), std::string::npos);
}

TEST(CoordinatorAddress, TheEnvironmentIsCheckedAndNamedWhenTheFlagIsAbsent) {
  ::setenv("COHORT_COORDINATOR", "10.0.0.9:7070", 1);
  auto from_env = coordinator_endpoint("");
  ASSERT_TRUE(from_env);
  EXPECT_EQ(*from_env, "tcp://10.0.0.9:7070");
  auto flag_wins = coordinator_endpoint("10.0.0.8:1");
  ASSERT_TRUE(flag_wins);
  EXPECT_EQ(*flag_wins, "tcp://10.0.0.8:1");
  ::setenv("COHORT_COORDINATOR", "nohost", 1);
  auto bad = coordinator_endpoint("");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("$COHORT_COORDINATOR 'nohost' has no port"),
            std::string::npos);
  ::unsetenv("COHORT_COORDINATOR");
  auto fallback = coordinator_endpoint("");
  ASSERT_TRUE(fallback);
  EXPECT_EQ(*fallback, "tcp://127.0.0.1:7070");
}

}  // namespace
}  // namespace cohort::cli
