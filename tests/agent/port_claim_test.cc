// MASTER_PORT claims: free ports only, one holder per port on this host, the
// job's range within the agent's.
#include "agent/port_claim.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>

#include <gtest/gtest.h>

namespace cohort::agent {
namespace {

// A listener on 0.0.0.0:port for the test's lifetime (-1 when it cannot
// bind); `reuse`: with SO_REUSEADDR, as rendezvous stores listen.
int listen_on(int port, bool reuse = false) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int on = 1;
  if (reuse) ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 1) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Three ports that are free now, for a range of its own.
jobs::PortRange free_range(std::mt19937_64& random) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    int first = 40000 + int(random() % 20000);
    bool free = true;
    for (int p = first; p < first + 3 && free; ++p) {
      int fd = listen_on(p);
      free = fd >= 0;
      if (fd >= 0) ::close(fd);
    }
    if (free) return {first, first + 2};
  }
  return {};
}

TEST(PortClaim, SkipsPortsInUseAndPortsAnotherClaimHolds) {
  std::mt19937_64 random(7);
  jobs::PortRange range = free_range(random);
  ASSERT_FALSE(range.empty());
  int busy = listen_on(range.first + 1);
  ASSERT_GE(busy, 0);
  auto a = PortClaim::claim(range, random);
  auto b = PortClaim::claim(range, random);
  ASSERT_TRUE(a && b) << (a ? b.status().message() : a.status().message());
  std::set<int> got = {a->port(), b->port()};
  EXPECT_EQ(got, (std::set<int>{range.first, range.last}));
  auto none = PortClaim::claim(range, random);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(none.status().message().find(jobs::to_string(range)), std::string::npos) << none.status().message();
  // A released claim is claimable again; the listener's port still is not.
  int released = a->port();
  { PortClaim gone = std::move(*a); }
  auto again = PortClaim::claim(range, random);
  ASSERT_TRUE(again) << again.status().message();
  EXPECT_EQ(again->port(), released);
  ::close(busy);
}

TEST(PortClaim, AClaimedPortIsStillFreeForTheWorkerToBind) {
  std::mt19937_64 random(11);
  jobs::PortRange range = free_range(random);
  ASSERT_FALSE(range.empty());
  auto claim = PortClaim::claim(range, random);
  ASSERT_TRUE(claim) << claim.status().message();
  int worker = listen_on(claim->port());
  EXPECT_GE(worker, 0) << "the claim must not keep the TCP port itself";
  if (worker >= 0) ::close(worker);
}

// The port of an earlier job's store, its connections closed by the server:
// TIME_WAIT on that port for a minute. Stores bind with SO_REUSEADDR (and
// their connections inherit it), so a one-port range must still hand it out.
TEST(PortClaim, APortInTimeWaitIsStillHandedOutWhenTheRangeHasNoOther) {
  std::mt19937_64 random(13);
  jobs::PortRange range = free_range(random);
  ASSERT_FALSE(range.empty());
  const int port = range.first;
  int server = listen_on(port, /*reuse=*/true);
  ASSERT_GE(server, 0);
  int client = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  int accepted = ::accept(server, nullptr, nullptr);
  ASSERT_GE(accepted, 0);
  ::close(accepted);  // the server side closes first: its end goes to TIME_WAIT
  ::close(server);
  char byte;
  (void)::read(client, &byte, 1);
  ::close(client);
  int strict = listen_on(port);
  if (strict >= 0) {
    ::close(strict);
    GTEST_SKIP() << "no TIME_WAIT on port " << port << " (the kernel reused it)";
  }
  auto claim = PortClaim::claim(jobs::PortRange{port, port}, random);
  ASSERT_TRUE(claim) << claim.status().message();
  EXPECT_EQ(claim->port(), port);
}

TEST(PortClaim, TheJobsRangeIsNarrowedToTheAgents) {
  auto both = effective_port_range("30000-30100", jobs::PortRange{30050, 30200});
  ASSERT_TRUE(both) << both.status().message();
  EXPECT_EQ(jobs::to_string(*both), "30050-30100");
  auto job_only = effective_port_range("31000-31009", {});
  ASSERT_TRUE(job_only);
  EXPECT_EQ(jobs::to_string(*job_only), "31000-31009");
  auto defaults = effective_port_range("", {});
  ASSERT_TRUE(defaults);
  EXPECT_EQ(jobs::to_string(*defaults), jobs::to_string(kDefaultPortRange));
  auto disjoint = effective_port_range("30000-30010", jobs::PortRange{40000, 40010});
  ASSERT_FALSE(disjoint);
  EXPECT_NE(disjoint.status().message().find("outside this agent's --port-range 40000-40010"), std::string::npos)
      << disjoint.status().message();
}

}  // namespace
}  // namespace cohort::agent
