// The agent daemon: registers its node and GPUs with the coordinator, sends
// heartbeats, carries out launch and stop orders through the Supervisor,
// forwards worker output and exits, and proxies the rendezvous store.
//
// It survives the coordinator going away: ZeroMQ reconnects, and when the
// coordinator answers a heartbeat with "unknown_node" (it restarted, or
// declared this node lost) the agent registers again, listing the workers
// it still runs so the coordinator can keep or stop them.
//
// While the coordinator is silent the agent probes its port once a second
// and logs why (nothing listening, unreachable, a refused key) within a few
// seconds. Once heartbeat_timeout has passed since its last answered
// heartbeat it stops its workers (self-fencing, coordinator_contact.h), takes
// no launch order until the coordinator answers again, and reports what it
// stopped when it registers again.
//
// Threading: everything runs on the io_context given to start(); create,
// use and destroy the agent on that thread (or before/after it runs).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "agent/gpu_discovery.h"
#include "agent/log_forwarder.h"
#include "agent/process_launcher.h"
#include "base/clock.h"
#include "base/status.h"
#include "jobs/spec.h"
#include "protocol/security.h"

namespace zmq {
class context_t;
}

namespace cohort::agent {

struct AgentOptions {
  std::string coordinator = "tcp://127.0.0.1:7070";
  std::string name;     // empty: the host name
  std::string address;    // --advertise-address; empty: chosen (node_address.h)
  std::string interface;  // --interface; empty: the one holding the address
  protocol::Security security;
  std::shared_ptr<GpuProber> prober;          // required
  std::shared_ptr<ProcessLauncher> launcher;  // required
  const Clock* clock = nullptr;               // null: the system clock
  std::string worker_binary;                  // cohort-worker; empty: next to this program
  jobs::PortRange port_range;                 // MASTER_PORT candidates; empty: the job's, else 29500-30499
  std::chrono::milliseconds heartbeat_interval{500};  // until the coordinator says otherwise
  std::chrono::milliseconds poll_interval{100};       // log flushing, hang and contact checks
  std::chrono::milliseconds probe_timeout{1000};      // a probe of a silent coordinator's port
  // Stop the workers when the coordinator has been silent for its
  // heartbeat_timeout (off for the embedded cluster: one process).
  bool fence = true;
  std::shared_ptr<zmq::context_t> zmq_context;        // null: a new one
  LogForwardingLimits log_limits;                     // worker output to the coordinator (log_forwarder.h)
};

class Agent {
 public:
  // Probes the GPUs and starts connecting. Fails when the prober fails or
  // finds nothing (the error suggests --fake-gpus / --cpu-slots).
  static Result<std::unique_ptr<Agent>> start(boost::asio::io_context& io, AgentOptions options);
  virtual ~Agent() = default;

  virtual const std::string& name() const = 0;
  // Leaves the cluster: tells the coordinator (which drains the node: the
  // attempts here stop without counting as failures), refuses new launch
  // orders, stops every worker (SIGTERM, then SIGKILL after each job's
  // stop_grace), reports their exits and that the node has left, then calls
  // `done` on the loop.
  virtual void shutdown(std::function<void()> done) = 0;
  virtual size_t live_workers() const = 0;
  // The address registered with the coordinator (MASTER_ADDR for jobs
  // whose rank 0 runs here).
  virtual const std::string& address() const = 0;
};

// The cohort-worker next to the running program (/proc/self/exe's folder),
// or "" when there is none.
std::string default_worker_binary();
// An empty *path becomes default_worker_binary() (still empty when there is
// none: only command jobs can run then); a given one must be executable,
// else an error naming it. Logs the worker used.
Status resolve_worker_binary(std::string* path);

}  // namespace cohort::agent
