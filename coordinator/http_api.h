// HttpApi: the coordinator's HTTP view, served by Boost.Beast on the
// coordinator's own io_context (DESIGN §4).
//
//   GET  /                      a small HTML page: nodes and jobs
//   GET  /api/jobs              every job (JSON, the shape of `cohort jobs --json`)
//   GET  /api/jobs/<id>         one job, with attempts, root cause and events
//   GET  /api/nodes             every node
//   GET  /metrics               Prometheus text: nodes, GPUs, jobs by state, restarts
//   POST /api/jobs/<id>/cancel  only with `Authorization: Bearer <token>`
//
// Read-only unless a token is configured: without one every POST is 403.
// Bad requests get a 4xx and a log line; the server goes on. Threading: the
// io_context's thread only, like the coordinator.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "base/status.h"
#include "protocol/messages.h"

namespace cohort::coordinator {

struct HttpSources {
  std::function<std::vector<protocol::JobInfo>()> jobs;
  std::function<std::vector<protocol::NodeInfo>()> nodes;
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
