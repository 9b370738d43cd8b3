// choose_node_address on this host's real interfaces: the flags, the
// loopback rule, and the route to a coordinator (never loopback for one that
// is not on a loopback endpoint). The network-namespace suite
// (tests/cluster) checks the same across real links.
#include <gtest/gtest.h>

#include "agent/node_address.h"

namespace cohort::agent {
namespace {

// The first non-loopback address of an interface that is up, or null.
std::optional<InterfaceAddress> routable_address() {
  for (const auto& a : interface_addresses()) {
    if (a.up && !a.loopback && !a.ipv6) return a;
  }
  return std::nullopt;
}

TEST(NodeAddress, ALoopbackCoordinatorMeansOneHost) {
  for (const char* endpoint :
       {"tcp://127.0.0.1:7070", "tcp://localhost:7070", "ipc:///tmp/c.sock"}) {
    auto chosen = choose_node_address(endpoint, "", "");
    ASSERT_TRUE(chosen) << chosen.status().message();
    EXPECT_EQ(chosen->address, "127.0.0.1") << endpoint;
    EXPECT_EQ(chosen->interface, "") << endpoint;
    EXPECT_FALSE(chosen->named);
  }
}

TEST(NodeAddress, AnAdvertisedAddressIsKeptAndTheInterfaceHoldingItFound) {
  auto chosen = choose_node_address("tcp://10.1.2.3:7070", "node-7.cluster", "");
  ASSERT_TRUE(chosen);
  EXPECT_EQ(chosen->address, "node-7.cluster");  // a name is passed on as given
  EXPECT_EQ(chosen->interface, "");
  EXPECT_TRUE(chosen->named);
  auto a = routable_address();
  if (!a) GTEST_SKIP() << "this host has no non-loopback IPv4 address";
  chosen = choose_node_address("tcp://10.1.2.3:7070", a->address, "");
  ASSERT_TRUE(chosen);
  EXPECT_EQ(chosen->address, a->address);
  EXPECT_EQ(chosen->interface, a->interface);
}

TEST(NodeAddress, AnInterfaceGivesItsAddressAndAnUnknownOneIsAnErrorListingTheKnownOnes) {
  auto bad = choose_node_address("tcp://10.1.2.3:7070", "", "no-such-if0");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("--interface no-such-if0"), std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("lo 127.0.0.1"), std::string::npos)
      << bad.status().message();
  auto a = routable_address();
  if (!a) GTEST_SKIP() << "this host has no non-loopback IPv4 address";
  auto chosen = choose_node_address("tcp://10.1.2.3:7070", "", a->interface);
  ASSERT_TRUE(chosen) << chosen.status().message();
  EXPECT_EQ(chosen->interface, a->interface);
  EXPECT_FALSE(is_loopback_address(chosen->address));
  EXPECT_TRUE(chosen->named);
}

TEST(NodeAddress, ARemoteCoordinatorGivesTheAddressOnTheRouteToItNeverLoopback) {
  auto a = routable_address();
  if (!a) GTEST_SKIP() << "this host has no non-loopback IPv4 address";
  // This host's own address: the kernel routes to it through lo, but the
  // source it picks is the address itself, which other hosts can dial.
  auto chosen = choose_node_address("tcp://" + a->address + ":7070", "", "");
  ASSERT_TRUE(chosen) << chosen.status().message();
  EXPECT_EQ(chosen->address, a->address) << chosen->how;
  EXPECT_EQ(chosen->interface, a->interface);
  EXPECT_FALSE(chosen->named);
  EXPECT_NE(chosen->how.find("the route to the coordinator at"), std::string::npos) << chosen->how;
}

TEST(NodeAddress, ACoordinatorNameThatDoesNotResolveFallsBackToAnInterfaceAddress) {
  auto chosen = choose_node_address("tcp://no-such-coordinator.invalid:7070", "", "");
  ASSERT_TRUE(chosen) << chosen.status().message();
  EXPECT_NE(chosen->how.find("does not resolve"), std::string::npos) << chosen->how;
  if (routable_address()) {
    EXPECT_FALSE(is_loopback_address(chosen->address)) << chosen->how;
  }
}

TEST(NodeAddress, LoopbackAddressesAreRecognisedByValue) {
  EXPECT_TRUE(is_loopback_address("127.0.0.1"));
  EXPECT_TRUE(is_loopback_address("127.0.1.1"));
  EXPECT_TRUE(is_loopback_address("::1"));
  EXPECT_TRUE(is_loopback_address("localhost"));
  EXPECT_FALSE(is_loopback_address("10.0.0.1"));
  EXPECT_FALSE(is_loopback_address("127.example.com"));
}

}  // namespace
}  // namespace cohort::agent
