// probe_coordinator: resolve, connect, time out; and the words for the log.
#include "agent/coordinator_probe.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "collective/store/tcp_store.h"

namespace cohort::agent {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

class TcpProbe : public std::enable_shared_from_this<TcpProbe> {
 public:
  TcpProbe(asio::io_context& io, std::function<void(Probe)> done)
      : resolver_(io), socket_(io), timer_(io), done_(std::move(done)) {}

  void start(const std::string& host, int port, std::chrono::milliseconds timeout) {
    auto self = shared_from_this();
    timer_.expires_after(timeout);
    timer_.async_wait([self, timeout](const boost::system::error_code& ec) {
      if (ec) return;
      auto ms = std::to_string(timeout.count()) + " ms";
      if (self->resolving_)
        return self->finish({ProbeResult::kUnresolvable, "no answer from DNS within " + ms});
      self->finish({ProbeResult::kUnreachable, "no answer within " + ms});
    });
    resolver_.async_resolve(
        host, std::to_string(port),
        [self](const boost::system::error_code& ec, tcp::resolver::results_type found) {
          self->resolving_ = false;
          if (self->finished_) return;
          if (ec) return self->finish({ProbeResult::kUnresolvable, ec.message()});
          self->connect(found);
        });
  }

 private:
  void connect(const tcp::resolver::results_type& found) {
    auto self = shared_from_this();
    asio::async_connect(socket_, found,
                        [self](const boost::system::error_code& ec, const tcp::endpoint&) {
                          if (self->finished_) return;
                          if (!ec) return self->finish({ProbeResult::kAccepted, ""});
                          if (ec == asio::error::connection_refused)
                            return self->finish({ProbeResult::kRefused, ec.message()});
                          self->finish({ProbeResult::kUnreachable, ec.message()});
                        });
  }

  void finish(Probe probe) {
    if (finished_) return;
    finished_ = true;
    boost::system::error_code ignored;
    timer_.cancel();
    resolver_.cancel();
    socket_.close(ignored);
    done_(std::move(probe));
  }

  tcp::resolver resolver_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  std::function<void(Probe)> done_;
  bool resolving_ = true;
  bool finished_ = false;
};

// A local socket connects or fails at once: no timer needed.
Probe probe_ipc(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path)
    return {ProbeResult::kNotProbed, "path too long"};
  std::memcpy(addr.sun_path, path.data(), path.size());
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {ProbeResult::kNotProbed, std::strerror(errno)};
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int error = errno;
  ::close(fd);
  if (rc == 0) return {ProbeResult::kAccepted, ""};
  if (error == ECONNREFUSED || error == ENOENT)
    return {ProbeResult::kRefused, std::strerror(error)};
  return {ProbeResult::kUnreachable, std::strerror(error)};
}

}  // namespace

const char* to_string(ProbeResult result) {
  switch (result) {
    case ProbeResult::kAccepted:
      return "accepted";
    case ProbeResult::kRefused:
      return "refused";
    case ProbeResult::kUnreachable:
      return "unreachable";
    case ProbeResult::kUnresolvable:
      return "unresolvable";
    case ProbeResult::kNotProbed:
      return "not probed";
  }
  return "unknown";
}

void probe_coordinator(asio::io_context& io, const std::string& endpoint,
                       std::chrono::milliseconds timeout, std::function<void(Probe)> done) {
  auto later = [&io, done](Probe p) { asio::post(io, [done, p] { done(p); }); };
  if (endpoint.rfind("ipc://", 0) == 0) return later(probe_ipc(endpoint.substr(6)));
  std::string host;
  int port = 0;
  if (endpoint.rfind("tcp://", 0) != 0 || !store::parse_tcp_address(endpoint, &host, &port)) {
    return later({ProbeResult::kNotProbed, "not a tcp:// or ipc:// endpoint"});
  }
  std::make_shared<TcpProbe>(io, std::move(done))->start(host, port, timeout);
}

std::string describe_silence(const std::string& endpoint, const Probe& probe,
                             const std::string& handshake_problem) {
  std::string detail = probe.detail.empty() ? "" : " (" + probe.detail + ")";
  switch (probe.result) {
    case ProbeResult::kRefused:
      return "nothing listens at " + endpoint + detail +
             ": is `cohort coordinator` running there, with this --listen address and port?";
    case ProbeResult::kUnreachable:
      return endpoint + " is unreachable" + detail +
             ": a wrong address, a firewall dropping the port, or a network partition";
    case ProbeResult::kUnresolvable:
      return "the host of " + endpoint + " does not resolve" + detail;
    case ProbeResult::kAccepted:
      if (!handshake_problem.empty()) return handshake_problem;
      return endpoint +
             " accepts connections but the coordinator does not answer: check that --keys "
             "holds this coordinator's server.public and that the coordinator authorizes this "
             "agent's "
             "key (its log names refused keys), or the coordinator is overloaded";
    case ProbeResult::kNotProbed:
      break;
  }
  return "no answer from " + endpoint + detail;
}

}  // namespace cohort::agent
