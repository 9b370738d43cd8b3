// probe_coordinator: one connection attempt to the coordinator's port, to
// say why it is silent.
//
// ZeroMQ reconnects quietly, so an agent with a wrong address or a refused
// key would say nothing; the agent probes once a second while the
// coordinator does not answer and logs what it found. The probe also feeds
// the fencing lease: "refused" means no coordinator is running there
// (coordinator_contact.h).
//
// Threading: runs on the given io_context; `done` is called there once.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include <boost/asio/io_context.hpp>

namespace cohort::agent {

enum class ProbeResult {
  kAccepted,      // a TCP (or ipc) connection was made: something listens
  kRefused,       // nothing listens there
  kUnreachable,   // no answer within the timeout, or no route
  kUnresolvable,  // the host name does not resolve
  kNotProbed,     // an endpoint that cannot be probed (inproc://)
};
const char* to_string(ProbeResult result);

struct Probe {
  ProbeResult result = ProbeResult::kNotProbed;
  std::string detail;  // the OS's words ("Connection refused", "No route to host")
};

void probe_coordinator(boost::asio::io_context& io, const std::string& endpoint,
                       std::chrono::milliseconds timeout, std::function<void(Probe)> done);

// One sentence for the log: what the probe says about `endpoint`, with the
// transport's handshake failure (a refused key) when it has one.
std::string describe_silence(const std::string& endpoint, const Probe& probe,
                             const std::string& handshake_problem);

}  // namespace cohort::agent
