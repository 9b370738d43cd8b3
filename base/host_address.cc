#include "base/host_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <string>

namespace cohort {

HostKind classify_host(std::string_view host) {
  if (host == "localhost") return HostKind::kLoopback;
  const std::string text(host);  // inet_pton wants a terminated string
  in_addr a4{};
  if (::inet_pton(AF_INET, text.c_str(), &a4) == 1) {
    return (ntohl(a4.s_addr) >> 24) == 127 ? HostKind::kLoopback : HostKind::kOtherAddress;
  }
  in6_addr a6{};
  if (::inet_pton(AF_INET6, text.c_str(), &a6) == 1) {
    const bool mapped_loopback = IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
    return IN6_IS_ADDR_LOOPBACK(&a6) || mapped_loopback ? HostKind::kLoopback : HostKind::kOtherAddress;
  }
  return HostKind::kName;
}

}  // namespace cohort
