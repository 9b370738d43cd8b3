// TcpStoreServer: decodes requests, hands them to the backend and writes the
// reply when the backend's callback fires.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <future>
#include <thread>

#include <spdlog/spdlog.h>

#include "collective/store/tcp_store.h"
#include "collective/store/tcp_store_protocol.h"

namespace cohort::store {

using wire::Op;

namespace {

std::string error_reply(const Status& s) {
  wire::Writer w;
  w.u8(static_cast<uint8_t>(s.code()));
  w.str(s.message());
  return w.bytes();
}

// Encodes a reply from a Status or a Result.
std::string ok_reply() {
  wire::Writer w;
  w.u8(0);
  return w.bytes();
}

}  // namespace

Result<std::unique_ptr<TcpStoreServer>> TcpStoreServer::start(
    std::shared_ptr<StoreBackend> backend, const TcpStoreServerOptions& options) {
  int port = 0;
  COHORT_ASSIGN_OR_RETURN(int fd, wire::listen_tcp(options.host, options.port, &port));
  return std::unique_ptr<TcpStoreServer>(new TcpStoreServer(std::move(backend), options, fd, port));
}

TcpStoreServer::TcpStoreServer(std::shared_ptr<StoreBackend> backend,
                               const TcpStoreServerOptions& options, int listen_fd, int port)
    : options_(options), backend_(std::move(backend)), host_(options.host), listen_fd_(listen_fd),
      port_(port) {
  if (::pipe2(wake_pipe_, O_CLOEXEC) != 0) wake_pipe_[0] = wake_pipe_[1] = -1;
  acceptor_ = std::thread([this] { accept_loop(); });
}

TcpStoreServer::~TcpStoreServer() {
  stopping_ = true;
  if (wake_pipe_[1] >= 0) {
    char c = 0;
    [[maybe_unused]] auto n = ::write(wake_pipe_[1], &c, 1);
  }
  acceptor_.join();
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    // Wakes every connection thread out of its read.
    for (int fd : connections_) ::shutdown(fd, SHUT_RDWR);
    for (auto& [fd, t] : workers_) threads.push_back(std::move(t));
    workers_.clear();
    for (auto& t : finished_) threads.push_back(std::move(t));
    finished_.clear();
  }
  for (auto& t : threads) t.join();
  ::close(listen_fd_);
  for (int fd : wake_pipe_) {
    if (fd >= 0) ::close(fd);
  }
}

std::string TcpStoreServer::address() const {
  std::string host = host_.empty() || host_ == "0.0.0.0" ? "127.0.0.1" : host_;
  return "tcp://" + host + ":" + std::to_string(port_);
}

void TcpStoreServer::accept_loop() {
  while (!stopping_) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    int rc = ::poll(fds, wake_pipe_[0] >= 0 ? 2 : 1, 1000);
    if (rc <= 0 || !(fds[0].revents & POLLIN)) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors: the connection stays queued and poll says
      // readable again at once; back off instead of spinning.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      continue;
    }
    std::vector<std::thread> done;
    {
      std::lock_guard lock(mu_);
      if (connections_.size() >= options_.max_connections) {
        // One thread per connection: refuse beyond the cap rather than spawn.
        ::close(fd);
        done.swap(finished_);
        continue;
      }
      done.swap(finished_);
      connections_.push_back(fd);
      workers_.emplace(fd, std::thread([this, fd] { serve(fd); }));
    }
    for (auto& t : done) t.join();
  }
}

void TcpStoreServer::serve(int fd) {
  bool authed = options_.token.empty();
  while (!stopping_) {
    // No deadline on a request's arrival: an idle worker keeps its
    // connection for the whole job.
    auto request = wire::read_frame(fd, std::chrono::steady_clock::time_point::max(),
                                    options_.max_frame_bytes);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    if (!request.is_ok()) {
      if (request.status().code() == StatusCode::kInvalidArgument) {
        // Said to the peer before closing: a worker's oversized set learns
        // why at once instead of waiting out its timeout.
        (void)wire::write_frame(fd, error_reply(request.status()), deadline);
        spdlog::warn("store server: dropping a connection: {}", request.status().message());
      }
      break;
    }
    wire::Reader r(*request);
    bool is_auth = !request->empty() && static_cast<Op>(uint8_t((*request)[0])) == Op::kAuth;
    if (is_auth) {
      r.u8();
      std::string token = r.str();
      bool ok = r.ok() && r.at_end() && (options_.token.empty() || token == options_.token);
      Status s = ok ? Status::ok() : permission_denied("store: wrong COHORT_STORE_TOKEN");
      if (!wire::write_frame(fd, s.is_ok() ? ok_reply() : error_reply(s), deadline).is_ok() || !ok) break;
      authed = true;
      continue;
    }
    if (!authed) {
      (void)wire::write_frame(
          fd, error_reply(permission_denied("store: this store needs COHORT_STORE_TOKEN (send AUTH first)")),
          deadline);
      break;
    }
    std::string reply = handle(*request);
    deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    if (!wire::write_frame(fd, reply, deadline).is_ok()) break;
  }
  std::lock_guard lock(mu_);
  connections_.erase(std::remove(connections_.begin(), connections_.end(), fd), connections_.end());
  // Hand our own thread over for joining; the fd may be reused once closed.
  auto it = workers_.find(fd);
  if (it != workers_.end()) {
    finished_.push_back(std::move(it->second));
    workers_.erase(it);
  }
  ::close(fd);
}


std::string TcpStoreServer::handle(const std::string& request) {
  wire::Reader r(request);
  auto op = static_cast<Op>(r.u8());
  std::promise<std::string> reply;
  auto future = reply.get_future();
  auto status_done = [&reply](Status s) {
    reply.set_value(s.is_ok() ? ok_reply() : error_reply(s));
  };
  switch (op) {
    case Op::kSet: {
      std::string key = r.str();
      std::string value = r.str();
      if (!r.ok() || !r.at_end()) break;
      backend_->set(key, std::move(value), status_done);
      return future.get();
    }
    case Op::kGet: {
      std::string key = r.str();
      Milliseconds timeout(r.i64());
      if (!r.ok() || !r.at_end()) break;
      backend_->get(key, timeout, [&reply](Result<std::string> v) {
        if (!v.is_ok()) return reply.set_value(error_reply(v.status()));
        wire::Writer w;
        w.u8(0);
        w.str(*v);
        reply.set_value(w.bytes());
      });
      return future.get();
    }
    case Op::kAdd: {
      std::string key = r.str();
      int64_t delta = r.i64();
      if (!r.ok() || !r.at_end()) break;
      backend_->add(key, delta, [&reply](Result<int64_t> v) {
        if (!v.is_ok()) return reply.set_value(error_reply(v.status()));
        wire::Writer w;
        w.u8(0);
        w.i64(*v);
        reply.set_value(w.bytes());
      });
      return future.get();
    }
    case Op::kWait: {
      uint32_t n = r.u32();
      std::vector<std::string> keys;
      for (uint32_t i = 0; i < n && r.ok(); ++i) keys.push_back(r.str());
      Milliseconds timeout(r.i64());
      if (!r.ok() || !r.at_end()) break;
      backend_->wait(std::move(keys), timeout, status_done);
      return future.get();
    }
    case Op::kAuth:
      break;  // answered by serve(); here it is out of place
  }
  return error_reply(invalid_argument("store server: malformed request (opcode " +
                                      std::to_string(static_cast<int>(op)) + ")"));
}

}  // namespace cohort::store
