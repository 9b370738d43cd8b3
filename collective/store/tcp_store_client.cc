// TcpStoreClient: one socket, one request at a time.
#include <unistd.h>

#include "collective/store/tcp_store.h"
#include "collective/store/tcp_store_protocol.h"

namespace cohort::store {

using wire::Op;

Status parse_tcp_address(const std::string& address, std::string* host, int* port) {
  std::string rest = address;
  if (rest.rfind("tcp://", 0) == 0) rest = rest.substr(6);
  auto colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == rest.size()) {
    return invalid_argument("store address '" + address + "' is not of the form tcp://host:port");
  }
  std::string h = rest.substr(0, colon);
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  int p = 0;
  try {
    size_t used = 0;
    p = std::stoi(rest.substr(colon + 1), &used);
    if (used != rest.size() - colon - 1) p = -1;
  } catch (const std::exception&) {
    p = -1;
  }
  if (p <= 0 || p > 65535) {
    return invalid_argument("store address '" + address + "' has no valid port (1-65535)");
  }
  *host = h;
  *port = p;
  return Status::ok();
}

Result<std::unique_ptr<TcpStoreClient>> TcpStoreClient::connect(
    const std::string& host, int port, const TcpStoreClientOptions& options) {
  auto deadline = std::chrono::steady_clock::now() + options.connect_timeout;
  COHORT_ASSIGN_OR_RETURN(int fd, wire::connect_tcp(host, port, deadline));
  std::unique_ptr<TcpStoreClient> client(
      new TcpStoreClient(fd, host + ":" + std::to_string(port), options));
  if (!options.token.empty()) {
    wire::Writer w;
    w.u8(static_cast<uint8_t>(Op::kAuth));
    w.str(options.token);
    auto reply = client->call(w.bytes(), Milliseconds(0));
    if (!reply.is_ok()) return reply.status();
  }
  return client;
}

TcpStoreClient::~TcpStoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::string> TcpStoreClient::call(const std::string& request, Milliseconds op_timeout) {
  std::lock_guard lock(mu_);
  if (fd_ < 0) return unavailable("store " + endpoint_ + ": connection lost earlier");
  auto deadline = std::chrono::steady_clock::now() + op_timeout + options_.io_timeout;
  Status s = wire::write_frame(fd_, request, deadline);
  Result<std::string> body = s.is_ok() ? wire::read_frame(fd_, deadline) : Result<std::string>(s);
  if (!body.is_ok()) {
    // The stream is out of step (or gone): never reuse it.
    ::close(fd_);
    fd_ = -1;
    return body.status().with_context("store " + endpoint_);
  }
  wire::Reader r(*body);
  auto code = static_cast<StatusCode>(r.u8());
  if (!r.ok()) return internal_error("store " + endpoint_ + ": empty reply");
  if (code != StatusCode::kOk) {
    std::string message = r.str();
    return Status(code, message);
  }
  return body->substr(1);
}

Status TcpStoreClient::set(const std::string& key, const std::string& value) {
  wire::Writer w;
  w.u8(static_cast<uint8_t>(Op::kSet));
  w.str(key);
  w.str(value);
  auto reply = call(w.bytes(), Milliseconds(0));
  return reply.is_ok() ? Status::ok() : reply.status();
}

Result<std::string> TcpStoreClient::get(const std::string& key, Milliseconds timeout) {
  wire::Writer w;
  w.u8(static_cast<uint8_t>(Op::kGet));
  w.str(key);
  w.i64(timeout.count());
  COHORT_ASSIGN_OR_RETURN(std::string body, call(w.bytes(), timeout));
  wire::Reader r(body);
  std::string value = r.str();
  if (!r.ok()) return internal_error("store " + endpoint_ + ": malformed get reply");
  return value;
}

Result<int64_t> TcpStoreClient::add(const std::string& key, int64_t delta) {
  wire::Writer w;
  w.u8(static_cast<uint8_t>(Op::kAdd));
  w.str(key);
  w.i64(delta);
  COHORT_ASSIGN_OR_RETURN(std::string body, call(w.bytes(), Milliseconds(0)));
  wire::Reader r(body);
  int64_t sum = r.i64();
  if (!r.ok()) return internal_error("store " + endpoint_ + ": malformed add reply");
  return sum;
}

Status TcpStoreClient::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  wire::Writer w;
  w.u8(static_cast<uint8_t>(Op::kWait));
  w.u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  w.i64(timeout.count());
  auto reply = call(w.bytes(), timeout);
  return reply.is_ok() ? Status::ok() : reply.status();
}

}  // namespace cohort::store
