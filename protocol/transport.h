// The ZeroMQ transport, joined to a Boost.Asio io_context.
//
// The coordinator binds one ROUTER socket; agents and CLI clients connect
// DEALER sockets. Each socket's ZMQ_FD is watched by the daemon's io_context,
// so sockets, timers and HTTP share one thread and no locks. Every message is
// one frame holding an encoded envelope (protocol/codec.h).
//
// Threading: an endpoint and its handler run on the io_context's thread only.
// Handlers may send, and may destroy the endpoint (pending callbacks notice).
// Errors: bind/connect failures come back as Status; a failed send returns an
// error and drops the message, as ZeroMQ would for a vanished peer.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "base/status.h"
#include "protocol/security.h"

namespace zmq {
class context_t;
}

namespace cohort::protocol {

// Shared by the endpoints of one process; each owns a reference.
std::shared_ptr<zmq::context_t> make_zmq_context();

class RouterEndpoint {
 public:
  // `role`: what the peer's CURVE key authorizes (kTrusted without CURVE).
  using Handler = std::function<void(const std::string& peer, std::string payload, Role role)>;
  virtual ~RouterEndpoint() = default;

  // Binds `endpoint` ("tcp://127.0.0.1:7070"; port 0 picks a free one). With
  // security enabled, peers whose public key is not authorized are refused
  // during the handshake and never reach the handler.
  static Result<std::unique_ptr<RouterEndpoint>> bind(boost::asio::io_context& io,
                                                      std::shared_ptr<zmq::context_t> context,
                                                      const std::string& endpoint,
                                                      const Security& security, Handler handler);

  virtual Status send(const std::string& peer, const std::string& payload) = 0;
  // The endpoint actually bound, with the port filled in.
  virtual std::string endpoint() const = 0;
  // Inside the handler: the CURVE public key (Z85) of the peer whose message
  // it handles; "" without CURVE.
  virtual const std::string& current_key() const = 0;
};

class DealerEndpoint {
 public:
  using Handler = std::function<void(std::string payload)>;
  virtual ~DealerEndpoint() = default;

  // Connects (in the background, with ZeroMQ's automatic reconnects) to a
  // ROUTER at `endpoint`. Messages sent before the connection is up queue.
  static Result<std::unique_ptr<DealerEndpoint>> connect(boost::asio::io_context& io,
                                                         std::shared_ptr<zmq::context_t> context,
                                                         const std::string& endpoint,
                                                         const Security& security,
                                                         Handler handler);

  virtual Status send(const std::string& payload) = 0;
  // Why the last handshake with the coordinator failed (a refused CURVE
  // key, a mechanism mismatch); "" when the last one succeeded or none
  // failed.
  virtual std::string handshake_problem() const = 0;
  // Called on the loop when the coordinator's side closed a connection that
  // had completed its handshake: the coordinator process went away (a
  // partition closes nothing). Null: not watched.
  virtual void set_disconnect_handler(std::function<void()> handler) = 0;
};

}  // namespace cohort::protocol
