// How the control plane reads a host it is told to bind or serve on, the one
// rule behind every loopback check (the coordinator's --listen and --http,
// serve.host, the collective's bootstrap): an IP address is parsed, never
// matched by prefix ("127.invalid" is a name, not loopback), "localhost"
// means 127.0.0.1, and anything else is a name.
#pragma once

#include <string_view>

namespace cohort {

enum class HostKind {
  kLoopback,      // 127.0.0.0/8, ::1, ::ffff:127.x.x.x, or "localhost"
  kOtherAddress,  // any other IPv4 or IPv6 address (0.0.0.0 included)
  kName,          // not an IP address: a host or interface name, or garbage
};

// `host` without brackets or port ("::1", not "[::1]:80").
HostKind classify_host(std::string_view host);

inline bool is_loopback_host(std::string_view host) { return classify_host(host) == HostKind::kLoopback; }

}  // namespace cohort
