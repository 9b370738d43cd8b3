// A blocking request/reply client: what the CLI and the agent's store proxy
// use to talk to the coordinator without an event loop.
//
// Threading: one Client per thread (a ZeroMQ socket is not thread-safe).
// Errors: kUnavailable when no reply came within the timeout (DESIGN §5 maps
// that to exit code 3); the coordinator's error replies come back as the
// Status they name.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "base/status.h"
#include "protocol/codec.h"
#include "protocol/security.h"

namespace cohort::protocol {

class Client {
 public:
  // Does not wait for the connection; the first request does.
  static Result<std::unique_ptr<Client>> connect(const std::string& endpoint,
                                                 const Security& security);
  virtual ~Client() = default;

  // Sends `request` and waits for the reply with the same id.
  virtual Result<Envelope> call(const std::string& type, const nlohmann::json& body,
                                std::chrono::milliseconds timeout) = 0;

  template <typename Reply, typename Request>
  Result<Reply> request(const Request& req, std::chrono::milliseconds timeout) {
    COHORT_ASSIGN_OR_RETURN(Envelope e, call(Request::kType, nlohmann::json(req), timeout));
    return body_as<Reply>(e);
  }
};

// The coordinator address from --coordinator, else $COHORT_COORDINATOR, else
// tcp://127.0.0.1:7070.
std::string default_coordinator(const std::string& flag);

}  // namespace cohort::protocol
