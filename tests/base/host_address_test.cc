#include "base/host_address.h"

#include <gtest/gtest.h>

namespace cohort {
namespace {

TEST(HostAddress, LoopbackIsDecidedByTheParsedAddress) {
  for (const char* host : {"127.0.0.1", "127.255.0.9", "::1", "0:0:0:0:0:0:0:1", "::ffff:127.0.0.2", "localhost"}) {
    EXPECT_EQ(classify_host(host), HostKind::kLoopback) << host;
  }
  for (const char* host : {"0.0.0.0", "10.1.2.3", "128.0.0.1", "::", "fe80::1", "::ffff:10.0.0.1"}) {
    EXPECT_EQ(classify_host(host), HostKind::kOtherAddress) << host;
  }
}

TEST(HostAddress, AnythingElseIsANameEvenWithALoopbackPrefix) {
  for (const char* host : {"127.invalid", "127.0.0.1.example.com", "127.1", "127.0.0.1 ", "[::1]", "", "*",
                           "eth0", "localhost.localdomain"}) {
    EXPECT_EQ(classify_host(host), HostKind::kName) << '"' << host << '"';
  }
}

}  // namespace
}  // namespace cohort
