// HttpApi: the coordinator's HTTP view, served by Boost.Beast on the
// coordinator's own io_context (DESIGN §4).
//
//   GET  /                        the dashboard: nodes, GPUs, queue, jobs (HTML)
//   GET  /jobs/<id>               a job's page: state, attempts, ranks, plots, log
//                                 tail (?rank=R filters the log, ?x=time plots
//                                 against wall-clock time)
//   GET  /api/jobs                every job (JSON, the shape of `cohort jobs --json`)
//   GET  /api/jobs/<id>           one job, with attempts, root cause and events
//   GET  /api/jobs/<id>/logs      log lines: ?rank=R&attempt=A&after=SEQ&tail=N
//   GET  /api/jobs/<id>/metrics   the training figures the page plots (JSON)
//   GET  /api/nodes               every node, with GPU utilisation where known
//   GET  /metrics                 Prometheus text: cluster and per-job series
//   POST /api/jobs/<id>/cancel    with `Authorization: Bearer <token>`
//   POST /jobs/<id>/cancel        the page's cancel button (the token cookie)
//
//   GET  /health                  {"status": "ok"}, never behind slow clients
//
// Read-only unless a token is configured: without one every POST is 403.
// A browser is given the token once as `?token=T` on any page; it is kept in
// a SameSite=Strict, HttpOnly cookie, and only then do pages show the cancel
// button. SameSite does not tell ports apart, so a POST that relies on the
// cookie must also come from this origin (Origin, else Referer, names the
// Host) and carry the page's CSRF token (a random value per coordinator
// process, in the cancel form). With a token, a job's details and logs
// (/jobs/<id>, /api/jobs/<id>...) need it (bearer or cookie); the lists,
// /metrics and /health do not. Connections are capped (64, 16 per client
// address) with a first-byte (2 s) and a whole-request (5 s) timeout; a new
// connection takes the slot of the one waiting longest for its request
// (base/connection_slots.h). Bad requests get a 4xx and a log line; the
// server goes on.
// Threading: the io_context's thread only, like the coordinator.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "base/status.h"
#include "coordinator/job_view.h"
#include "protocol/messages.h"

namespace cohort::coordinator {

// Snapshots from the coordinator, called on its thread during a request.
struct HttpSources {
  std::function<std::vector<JobView>()> jobs;  // oldest first
  std::function<std::optional<JobView>(const std::string& id_or_name)> job;
  std::function<std::vector<protocol::NodeInfo>()> nodes;
  // tail > 0: the newest `tail` lines after query.after_seq; else lines
  // from after_seq on, oldest first, as `cohort logs` pages them.
  std::function<Result<protocol::LogReply>(const protocol::LogQuery& query, size_t tail)> logs;
  std::function<Status(const std::string& job_id)> cancel;
};

class HttpApi {
 public:
  // `listen` is "HOST:PORT" (port 0 picks one).
  static Result<std::unique_ptr<HttpApi>> start(boost::asio::io_context& io, const std::string& listen,
                                                HttpSources sources, std::string token);
  virtual ~HttpApi() = default;
  virtual int port() const = 0;
};

}  // namespace cohort::coordinator
