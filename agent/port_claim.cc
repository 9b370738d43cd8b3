// PortClaim: an abstract-socket lock per port plus a test bind.
#include "agent/port_claim.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace cohort::agent {
namespace {

// Binds "@cohort-port-<port>"; the descriptor holds the lock, -1 when another
// process holds it.
int lock_port(int port) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string name = "cohort-port-" + std::to_string(port);
  // Abstract namespace: a leading NUL, no file, gone with the process.
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  socklen_t len = socklen_t(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// True when a listener could bind `port` on every address right now (with
// `reuse`, as one that sets SO_REUSEADDR could: TIME_WAIT does not count).
bool port_is_free(int port, bool reuse) {
  int on = 1;
  int v4 = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (v4 < 0) return false;
  if (reuse) ::setsockopt(v4, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in a4{};
  a4.sin_family = AF_INET;
  a4.sin_port = htons(uint16_t(port));
  a4.sin_addr.s_addr = htonl(INADDR_ANY);
  bool free = ::bind(v4, reinterpret_cast<sockaddr*>(&a4), sizeof a4) == 0;
  ::close(v4);
  if (!free) return false;
  // A dual-stack listener on [::] (torch's TCPStore binds there first) holds
  // the IPv4 port too, but an IPv6-only one does not: test both. A host
  // without IPv6 has nothing to test.
  int v6 = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (v6 < 0) return true;
  ::setsockopt(v6, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on);
  if (reuse) ::setsockopt(v6, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in6 a6{};
  a6.sin6_family = AF_INET6;
  a6.sin6_port = htons(uint16_t(port));
  a6.sin6_addr = in6addr_any;
  free = ::bind(v6, reinterpret_cast<sockaddr*>(&a6), sizeof a6) == 0 || errno == EADDRNOTAVAIL;
  ::close(v6);
  return free;
}

}  // namespace

Result<PortClaim> PortClaim::claim(const jobs::PortRange& range, std::mt19937_64& random) {
  if (range.empty()) return invalid_argument("no port range to claim MASTER_PORT from");
  const int size = range.size();
  const int start = int(random() % uint64_t(size));
  for (bool reuse : {false, true}) {
    for (int i = 0; i < size; ++i) {
      int port = range.first + (start + i) % size;
      int fd = lock_port(port);
      if (fd < 0) continue;  // another agent of this host handed it out
      if (port_is_free(port, reuse)) return PortClaim(port, fd);
      ::close(fd);
    }
  }
  return unavailable("no free port for MASTER_PORT in " + jobs::to_string(range) +
                     ": every one is in use or held by another job on this host (widen job.port_range or "
                     "the agent's --port-range)");
}

PortClaim::PortClaim(PortClaim&& other) noexcept : port_(other.port_), lock_fd_(other.lock_fd_) {
  other.lock_fd_ = -1;
}

PortClaim& PortClaim::operator=(PortClaim&& other) noexcept {
  if (this != &other) {
    if (lock_fd_ >= 0) ::close(lock_fd_);
    port_ = other.port_;
    lock_fd_ = std::exchange(other.lock_fd_, -1);
  }
  return *this;
}

PortClaim::~PortClaim() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

Result<jobs::PortRange> effective_port_range(const std::string& job_range, const jobs::PortRange& agent_range) {
  jobs::PortRange job;
  if (!job_range.empty()) {
    std::string why;
    if (!jobs::parse_port_range(job_range, &job, &why)) return invalid_argument("job.port_range: " + why);
  }
  if (job.empty() && agent_range.empty()) return kDefaultPortRange;
  if (job.empty()) return agent_range;
  if (agent_range.empty()) return job;
  jobs::PortRange both{std::max(job.first, agent_range.first), std::min(job.last, agent_range.last)};
  if (both.first > both.last) {
    return invalid_argument("job.port_range " + jobs::to_string(job) + " lies outside this agent's --port-range " +
                            jobs::to_string(agent_range));
  }
  return both;
}

}  // namespace cohort::agent
