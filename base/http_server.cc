// Listener and Connection (see http_server.h).
#include "base/http_server.h"

#include <spdlog/spdlog.h>

namespace cohort::http {

namespace bhttp = beast::http;

std::string response_text(int status, std::string_view content_type, std::string_view body,
                          std::string_view extra_headers) {
  const auto reason = bhttp::obsolete_reason(static_cast<bhttp::status>(status));
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason) +
                    "\r\nServer: cohort\r\nContent-Type: " + std::string(content_type) +
                    "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  out += extra_headers;
  out += "Connection: close\r\n\r\n";
  out += body;
  return out;
}

Connection::Connection(tcp::socket socket, std::shared_ptr<SlotTable> table, uint64_t slot,
                       const ServerLimits& limits)
    : table_(std::move(table)), slot_(slot), limits_(limits), stream_(std::move(socket)) {}

Connection::~Connection() {
  table_->slots.release(slot_);
  table_->waiting.erase(slot_);
}

void Connection::evict() {
  closed_ = true;
  beast::error_code ignored;
  stream_.socket().close(ignored);
}

// The first byte, then the rest of the request, each against its clock.
void Connection::start() {
  stream_.expires_after(limits_.first_byte);
  stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
    if (ec) return;  // silent, gone or evicted: nothing to answer
    self->buffer_.commit(n);
    self->read_request();
  });
}

void Connection::read_request() {
  parser_ = std::make_unique<bhttp::request_parser<bhttp::string_body>>();
  parser_->body_limit(limits_.max_body_bytes);
  parser_->header_limit(limits_.max_header_bytes);
  stream_.expires_after(limits_.whole_request);
  bhttp::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
    self->stream_.expires_never();
    self->table_->slots.request_arrived(self->slot_);
    self->table_->waiting.erase(self->slot_);
    if (self->closed_) return;  // evicted meanwhile
    if (ec == bhttp::error::end_of_stream || ec == beast::error::timeout || ec == asio::error::eof ||
        ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor) {
      return;
    }
    Request& request = self->parser_->get();
    self->on_request(ec, request);
  });
}

void Connection::send(std::string bytes) {
  if (closed_) return;
  out_.push_back(std::move(bytes));
  if (!writing_) write_next();
}

void Connection::send_last(std::string bytes) {
  closing_ = true;
  send(std::move(bytes));
}

void Connection::write_next() {
  if (out_.empty()) {
    writing_ = false;
    if (closing_) {
      beast::error_code ignored;
      stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
      closed_ = true;
    }
    return;
  }
  writing_ = true;
  asio::async_write(stream_.socket(), asio::buffer(out_.front()),
                    [self = shared_from_this()](beast::error_code ec, size_t) {
                      self->out_.pop_front();
                      if (ec) {
                        self->out_.clear();
                        self->writing_ = false;
                        self->closed_ = true;
                        return self->on_write_error();
                      }
                      self->write_next();
                    });
}

Listener::Listener(asio::io_context& io, ServerLimits limits, Make make, std::string refusal,
                   std::function<void()> on_refused)
    : limits_(limits), make_(std::move(make)), refusal_(std::move(refusal)), on_refused_(std::move(on_refused)),
      acceptor_(io), retry_(io), table_(std::make_shared<SlotTable>(limits.connections)) {}

Status Listener::open(const std::string& host, int port, const std::string& what) {
  boost::system::error_code ec;
  auto address = asio::ip::make_address(host, ec);
  if (ec) return invalid_argument(what + ": '" + host + "' is not an IP address: " + ec.message());
  if (port < 0 || port > 65535) return invalid_argument(what + ": port " + std::to_string(port) + " is out of range");
  tcp::endpoint endpoint(address, static_cast<uint16_t>(port));
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return unavailable("cannot serve HTTP on " + host + ":" + std::to_string(port) + ": " + ec.message());
  accept();
  return Status::ok();
}

int Listener::port() const {
  boost::system::error_code ec;
  const auto endpoint = acceptor_.local_endpoint(ec);
  return ec ? 0 : endpoint.port();
}

void Listener::close() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  retry_.cancel();
}

void Listener::accept() {
  acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {
      // EMFILE and the like: the connection stays queued and accept fails
      // again at once; wait instead of spinning at 100% CPU.
      retry_.expires_after(std::chrono::milliseconds(100));
      retry_.async_wait([this](boost::system::error_code wait_ec) {
        if (!wait_ec) accept();
      });
      return;
    }
    boost::system::error_code address_ec;
    const std::string address = socket.remote_endpoint(address_ec).address().to_string();
    const uint64_t slot = next_slot_++;
    auto admission = table_->slots.admit(slot, address_ec ? "?" : address);
    if (admission.evict) {
      auto it = table_->waiting.find(*admission.evict);
      if (it != table_->waiting.end()) {
        auto evicted = it->second.lock();
        table_->waiting.erase(it);
        if (evicted) evicted->evict();
      }
    }
    if (admission.admitted) {
      auto connection = make_(std::move(socket), table_, slot);
      table_->waiting[slot] = connection;
      connection->start();
    } else if (!refusal_.empty()) {
      auto s = std::make_shared<tcp::socket>(std::move(socket));
      auto text = std::make_shared<std::string>(refusal_);
      asio::async_write(*s, asio::buffer(*text), [s, text](boost::system::error_code, size_t) {
        boost::system::error_code ignored;
        s->shutdown(tcp::socket::shutdown_both, ignored);
      });
      if (on_refused_) on_refused_();
    } else if (on_refused_) {
      on_refused_();  // the socket closes as it goes out of scope
    }
    accept();
  });
}

}  // namespace cohort::http
