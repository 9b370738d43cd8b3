// choose_node_address: flags, interfaces and the route to the coordinator.
#include "agent/node_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "collective/store/tcp_store.h"
#include "protocol/security.h"

namespace cohort::agent {
namespace {

std::string ntop(const sockaddr* sa) {
  char text[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, text, sizeof text);
  } else if (sa->sa_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, text, sizeof text);
  }
  return text;
}

// The source address of a UDP socket connected to host:port. connect() on a
// datagram socket only asks the routing table; nothing goes on the wire.
Result<std::string> local_address_toward(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) return unavailable("'" + host + "' does not resolve: " + ::gai_strerror(rc));
  std::string error = "no address of '" + host + "' is routable from here";
  std::string local;
  for (addrinfo* ai = found; ai && local.empty(); ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage mine{};
    socklen_t len = sizeof mine;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &len) == 0) {
      local = ntop(reinterpret_cast<sockaddr*>(&mine));
    } else {
      error = "no route to " + ntop(ai->ai_addr) + ": " + std::strerror(errno);
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (local.empty()) return unavailable(error);
  return local;
}

std::string interface_of(const std::string& address) {
  for (const auto& a : interface_addresses()) {
    if (a.address == address) return a.loopback ? "" : a.interface;
  }
  return "";
}

// The first address of an interface that is up and not loopback, IPv4 first.
const InterfaceAddress* first_routable(const std::vector<InterfaceAddress>& all) {
  for (bool v6 : {false, true}) {
    for (const auto& a : all) {
      if (a.up && !a.loopback && a.ipv6 == v6) return &a;
    }
  }
  return nullptr;
}

std::string interface_names(const std::vector<InterfaceAddress>& all) {
  std::string out;
  for (const auto& a : all) out += (out.empty() ? "" : ", ") + a.interface + " " + a.address;
  return out.empty() ? "none" : out;
}

}  // namespace

bool is_loopback_address(const std::string& address) {
  if (address == "localhost") return true;
  in_addr a4{};
  if (::inet_pton(AF_INET, address.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  in6_addr a6{};
  return ::inet_pton(AF_INET6, address.c_str(), &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
}

std::vector<InterfaceAddress> interface_addresses() {
  std::vector<InterfaceAddress> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
      continue;
    InterfaceAddress a;
    a.interface = i->ifa_name;
    a.address = ntop(i->ifa_addr);
    a.ipv6 = i->ifa_addr->sa_family == AF_INET6;
    a.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    a.up = (i->ifa_flags & IFF_UP) != 0;
    // Link-local IPv6 addresses need a scope to be dialled: useless to peers.
    if (a.ipv6 && IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr))
      continue;
    out.push_back(std::move(a));
  }
  ::freeifaddrs(list);
  return out;
}

Result<NodeAddress> choose_node_address(const std::string& coordinator_endpoint,
                                        const std::string& advertise,
                                        const std::string& interface) {
  auto all = interface_addresses();
  NodeAddress chosen;
  chosen.named = !advertise.empty() || !interface.empty();
  if (!interface.empty()) {
    const InterfaceAddress* first = nullptr;
    for (bool v6 : {false, true}) {
      for (const auto& a : all) {
        if (!first && a.interface == interface && a.ipv6 == v6) first = &a;
      }
    }
    if (!first) {
      return invalid_argument("--interface " + interface +
                              ": no such interface with an address on this host (" +
                              interface_names(all) + ")");
    }
    chosen.interface = first->loopback ? "" : interface;
    chosen.address = advertise.empty() ? first->address : advertise;
    chosen.how = "from --interface " + interface;
    if (!advertise.empty()) chosen.how = "from --advertise-address";
    return chosen;
  }
  if (!advertise.empty()) {
    chosen.address = advertise;
    chosen.interface = interface_of(advertise);
    chosen.how = "from --advertise-address";
    return chosen;
  }
  if (protocol::is_loopback_endpoint(coordinator_endpoint)) {
    chosen.address = "127.0.0.1";
    chosen.how = "the coordinator is on this host's loopback";
    return chosen;
  }
  std::string host;
  int port = 0;
  std::string why;
  if (coordinator_endpoint.rfind("tcp://", 0) != 0) {
    why = "the coordinator endpoint " + coordinator_endpoint + " is not tcp://";
  } else if (auto s = store::parse_tcp_address(coordinator_endpoint, &host, &port); !s) {
    why = "cannot read the coordinator endpoint " + coordinator_endpoint;
  } else if (auto local = local_address_toward(host, port); !local) {
    why = local.status().message();
  } else if (is_loopback_address(*local)) {
    why = "the route to " + host + " is loopback";
  } else {
    chosen.address = *local;
    chosen.interface = interface_of(*local);
    chosen.how = "the route to the coordinator at " + host;
    return chosen;
  }
  if (const InterfaceAddress* a = first_routable(all)) {
    chosen.address = a->address;
    chosen.interface = a->interface;
    chosen.how = why + "; the first address of " + a->interface +
                 " (pass --advertise-address or --interface to choose)";
    return chosen;
  }
  chosen.address = "127.0.0.1";
  chosen.how = why + "; this host has no non-loopback address, so only one-node jobs can run";
  return chosen;
}

}  // namespace cohort::agent
