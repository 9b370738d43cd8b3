// NodeAddress: the address a node's peers reach it at, and its interface.
//
// The address is registered with the coordinator (`cohort nodes` shows it),
// becomes MASTER_ADDR for jobs whose rank 0 runs on the node, and is where
// the node's workers listen for Gloo; the interface, where one is known, is
// given to workers as GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME. A host name
// is a poor default: on many hosts it resolves to 127.0.1.1 or to nothing,
// and a 2-node Gloo job then dials 127.0.0.1.
//
// Choice, first match wins:
//   1. --advertise-address ADDR (any address or name; kept as given);
//   2. --interface IF: that interface's first IPv4 address (else IPv6);
//   3. a loopback coordinator endpoint (127.x, localhost, ipc://, inproc://):
//      127.0.0.1, a one-host cluster;
//   4. the local address the kernel picks to reach the coordinator (a UDP
//      socket connected to it: no packet is sent, so this works while the
//      coordinator is down); if that is a loopback address (the coordinator's
//      name resolves to 127.0.1.1, say), or the name does not resolve, the
//      first non-loopback address of an interface that is up.
// The interface is the named one, else the one holding the chosen address
// (none for a loopback address or a name). Errors name the flag at fault.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace cohort::agent {

struct NodeAddress {
  std::string address;    // what peers dial: an IP address, or a name when given one
  std::string interface;  // "" when unknown or loopback
  bool named = false;     // the user gave --advertise-address or --interface
  std::string how;        // for the log: "from --interface eth1", "route to 10.0.0.1", …
};

// `advertise` and `interface` are the flags ("" when not given).
Result<NodeAddress> choose_node_address(const std::string& coordinator_endpoint,
                                        const std::string& advertise, const std::string& interface);

// One address of one interface (getifaddrs).
struct InterfaceAddress {
  std::string interface;
  std::string address;
  bool ipv6 = false;
  bool loopback = false;
  bool up = false;
};
std::vector<InterfaceAddress> interface_addresses();

bool is_loopback_address(const std::string& address);

}  // namespace cohort::agent
