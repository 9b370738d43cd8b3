// PortClaim: a TCP port this host hands to one job attempt as MASTER_PORT.
//
// Two things make a port safe to hand out: nothing listens on it now (a
// test bind on 0.0.0.0 and [::]; ports with connections of an earlier job
// still in TIME_WAIT are passed over while the range has others, and taken
// after that, as the stores that bind MASTER_PORT set SO_REUSEADDR: torch's
// TCPStore and cohort's own), and no other cohort agent on this host
// (another `cohort run`, another agent) has handed it out and is waiting for
// its worker to bind it. The second is a host-wide lock without files: the
// claim binds the abstract Unix socket "@cohort-port-<P>", which the kernel
// gives to one process at a time, per network namespace like the TCP port
// itself, and frees when the holder exits, even by SIGKILL.
//
// Candidates are tried from a random point of the range onwards, so that
// agents starting together do not all race for its first port.
//
// Move-only; destroying it releases the lock (not the worker's listening
// socket, which is the worker's own). Thread-compatible.
#pragma once

#include <random>

#include "base/status.h"
#include "jobs/spec.h"

namespace cohort::agent {

// The range used when neither the job nor the agent names one. Below the
// kernel's ephemeral ports (32768+), so outgoing connections never take it.
inline constexpr jobs::PortRange kDefaultPortRange{29500, 30499};

class PortClaim {
 public:
  // Claims a free port of `range` (non-empty). kUnavailable naming the range
  // when every port is in use or claimed.
  static Result<PortClaim> claim(const jobs::PortRange& range, std::mt19937_64& random);
  PortClaim(PortClaim&& other) noexcept;
  PortClaim& operator=(PortClaim&& other) noexcept;
  PortClaim(const PortClaim&) = delete;
  PortClaim& operator=(const PortClaim&) = delete;
  ~PortClaim();

  int port() const { return port_; }

 private:
  PortClaim(int port, int lock_fd) : port_(port), lock_fd_(lock_fd) {}
  int port_ = 0;
  int lock_fd_ = -1;
};

// The ports a job may use on this node: the job's range within the agent's
// (either may be empty: no constraint; both empty: kDefaultPortRange).
// kInvalidArgument naming both when they do not overlap.
Result<jobs::PortRange> effective_port_range(const std::string& job_range, const jobs::PortRange& agent_range);

}  // namespace cohort::agent
