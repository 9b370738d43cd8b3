// The HTTP/1.1 server core that the coordinator's web page and API and the
// inference server share: one request per connection, read under two
// clocks, answered, closed.
//
// A Listener accepts under ConnectionSlots (connection_slots.h): a slot per
// connection, capped in all and per client address; a connection still
// waiting for its request gives its slot up when a new one needs it, and a
// connection refused outright gets the listener's refusal text. A failed
// accept (EMFILE and the like) waits 100 ms before the next, rather than
// spinning. A Connection reads its request's first byte within `first_byte`
// and the whole request (header up to `max_header_bytes`, body up to
// `max_body_bytes`) within `whole_request`, then hands it to on_request;
// what it sends is written in order, and send_last closes the connection
// once written. Everything runs on the io_context's thread.
#pragma once

// <utility> first: Boost.Asio's awaitable.hpp uses std::exchange without it.
#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "base/connection_slots.h"
#include "base/status.h"

namespace cohort::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using Request = beast::http::request<beast::http::string_body>;

struct ServerLimits {
  ConnectionLimits connections;
  std::chrono::milliseconds first_byte{2000};
  std::chrono::milliseconds whole_request{5000};
  uint64_t max_body_bytes = uint64_t{1} << 20;
  uint32_t max_header_bytes = 16 * 1024;
};

// A whole response: status line, Server, Content-Type, Content-Length,
// `extra_headers` (each ending in CRLF), Connection: close, then the body.
std::string response_text(int status, std::string_view content_type, std::string_view body,
                          std::string_view extra_headers = {});

class Connection;

// The slots and the connections still waiting for their requests, shared by
// the listener and its connections: a connection's last handler may run
// after the listener is gone, and must not touch it then.
struct SlotTable {
  explicit SlotTable(ConnectionLimits limits) : slots(limits) {}
  ConnectionSlots slots;
  std::map<uint64_t, std::weak_ptr<Connection>> waiting;  // by slot
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  virtual ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Reads the request (the listener calls it once the connection is registered).
  void start();
  // Closes a connection still waiting for its request, to make room.
  void evict();

 protected:
  Connection(tcp::socket socket, std::shared_ptr<SlotTable> table, uint64_t slot, const ServerLimits& limits);

  // The request arrived whole (`ec` clear), or reading it failed with `ec`:
  // beast::http::error::body_limit past max_body_bytes, another error for a
  // malformed request. Not called when the client sent nothing in time, went
  // away or was evicted: there is no one to answer.
  virtual void on_request(beast::error_code ec, Request& request) = 0;
  // A write failed: the client is gone. Queued data is dropped.
  virtual void on_write_error() {}

  void send(std::string bytes);       // written after what is queued
  void send_last(std::string bytes);  // ... and then the connection closes
  bool closed() const { return closed_; }
  void mark_closed() { closed_ = true; }
  beast::tcp_stream& stream() { return stream_; }

 private:
  void read_request();
  void write_next();

  std::shared_ptr<SlotTable> table_;
  const uint64_t slot_;
  const ServerLimits limits_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::unique_ptr<beast::http::request_parser<beast::http::string_body>> parser_;
  std::deque<std::string> out_;
  bool writing_ = false, closing_ = false, closed_ = false;
};

class Listener {
 public:
  // Makes the connection for an admitted socket (not started yet).
  using Make = std::function<std::shared_ptr<Connection>(tcp::socket socket, std::shared_ptr<SlotTable> table,
                                                         uint64_t slot)>;
  // `refusal`: written to a connection refused for want of a slot before it
  // closes ("" closes it at once); `on_refused` is then called.
  Listener(asio::io_context& io, ServerLimits limits, Make make, std::string refusal = {},
           std::function<void()> on_refused = {});

  // Binds and starts accepting; `what` names the setting in errors
  // ("serve.host", "--http").
  Status open(const std::string& host, int port, const std::string& what);
  int port() const;
  const ServerLimits& limits() const { return limits_; }
  // Stops accepting (the io_context's thread, or before it runs).
  void close();

 private:
  void accept();

  ServerLimits limits_;
  Make make_;
  std::string refusal_;
  std::function<void()> on_refused_;
  tcp::acceptor acceptor_;
  asio::steady_timer retry_;
  std::shared_ptr<SlotTable> table_;
  uint64_t next_slot_ = 1;
};

}  // namespace cohort::http
