// The coordinator daemon: node registry, job queue and gang scheduler,
// attempts and elastic restarts, rendezvous store, log serving and durable
// state, all on one Boost.Asio io_context (DESIGN §4).
//
// Ownership and threading: start() binds the ROUTER socket on `io` and
// returns the running coordinator; everything it does happens on the thread
// that runs `io`. Destroy it on that thread, or after `io` has stopped.
// Errors: start() fails when it cannot bind, when the security rule refuses
// the address, or when the state directory cannot be opened. Once started,
// nothing a peer sends can stop it: bad messages get error replies.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "base/clock.h"
#include "base/status.h"
#include "protocol/messages.h"
#include "protocol/security.h"

namespace zmq {
class context_t;
}

namespace cohort::coordinator {

struct CoordinatorOptions {
  std::string listen = "tcp://127.0.0.1:7070";
  protocol::Security security;
  bool insecure = false;        // allow a non-loopback bind without CURVE
  std::string state_dir;        // empty: state in memory only
  std::chrono::milliseconds heartbeat_interval{500};   // told to agents
  std::chrono::milliseconds heartbeat_timeout{2500};   // silent this long: node lost
  std::chrono::milliseconds tick_interval{100};        // timeouts are checked this often
  std::chrono::milliseconds store_timeout{std::chrono::minutes(5)};  // default get/wait timeout
  // After a restart, how long agents have to report the workers of running
  // attempts before those attempts are restarted. 0: 2 × heartbeat_timeout.
  std::chrono::milliseconds recovery_grace{0};
  // A node lost this long after a rank failure of the attempt it runs is
  // taken as that failure's cause (job_record.h). 0: heartbeat_timeout +
  // 2 × heartbeat_interval, the longest a dead node can stay unnoticed.
  std::chrono::milliseconds consequence_window{0};
  // Finished jobs stay in memory (and in `cohort jobs`) this long, and at
  // most this many of them; older ones are only in the state database.
  std::chrono::milliseconds finished_retention{std::chrono::hours(24)};
  size_t max_finished_jobs = 1000;
  // Worker output kept per job and in all (the oldest lines go first), in
  // memory and in the state database, which gets new lines this often.
  size_t log_bytes_per_job = 16 << 20;
  size_t log_bytes_total = 256 << 20;
  std::chrono::milliseconds log_flush_interval{1000};
  // Per-client-key limits for every key (the one local user without CURVE):
  // GPUs a key's running jobs hold at once, and its jobs waiting in the
  // queue; -1: no limit. A key's own line in authorized_clients
  // (security.client_keys) overrides them. key_limits.h has the rules.
  int max_gpus_per_key = -1;
  int max_queued_per_key = -1;
  std::string http_listen;      // "HOST:PORT" for the HTTP API; empty: none
  std::string http_token;       // empty: the HTTP API is read-only
  const Clock* clock = nullptr;  // null: the system clock
  std::shared_ptr<zmq::context_t> zmq_context;  // null: a new one
};

class Coordinator {
 public:
  static Result<std::unique_ptr<Coordinator>> start(boost::asio::io_context& io,
                                                    CoordinatorOptions options);
  virtual ~Coordinator() = default;

  // The bound endpoint, port filled in ("tcp://127.0.0.1:41234").
  virtual std::string endpoint() const = 0;
  // A snapshot of every job, oldest first (for the embedded runner and tests).
  virtual std::vector<protocol::JobInfo> jobs() const = 0;
  // The HTTP API's port, 0 when it is off.
  virtual int http_port() const = 0;
};

}  // namespace cohort::coordinator
