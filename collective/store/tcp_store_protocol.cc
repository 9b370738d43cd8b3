// Frame encoding and the blocking socket calls beneath the TCP store.
#include "collective/store/tcp_store_protocol.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <thread>

namespace cohort::store::wire {

void Writer::u32(uint32_t v) {
  for (int i = 0; i < 4; ++i) buf_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void Writer::i64(int64_t v) {
  auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) buf_.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}
void Writer::str(std::string_view s) {
  u32(static_cast<uint32_t>(s.size()));
  buf_.append(s);
}

bool Reader::take(size_t n, const char** p) {
  if (!ok_ || data_.size() - pos_ < n) {
    ok_ = false;
    return false;
  }
  *p = data_.data() + pos_;
  pos_ += n;
  return true;
}
uint8_t Reader::u8() {
  const char* p;
  return take(1, &p) ? static_cast<uint8_t>(*p) : 0;
}
uint32_t Reader::u32() {
  const char* p;
  if (!take(4, &p)) return 0;
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}
int64_t Reader::i64() {
  const char* p;
  if (!take(8, &p)) return 0;
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return static_cast<int64_t>(v);
}
std::string Reader::str() {
  uint32_t n = u32();
  const char* p;
  if (!take(n, &p)) return {};
  return std::string(p, n);
}

namespace {

// Waits until `fd` is ready for `events` or the deadline passes.
Status poll_until(int fd, short events, Deadline deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return timeout_error("store: socket I/O deadline passed");
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (rc > 0) return Status::ok();
    if (rc < 0 && errno != EINTR) return errno_error("store: poll");
  }
}

Status write_all(int fd, const char* p, size_t n, Deadline deadline) {
  while (n > 0) {
    COHORT_RETURN_IF_ERROR(poll_until(fd, POLLOUT, deadline));
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      if (errno == EPIPE || errno == ECONNRESET)
        return unavailable("store: peer closed the connection");
      return errno_error("store: send");
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::ok();
}

Status read_all(int fd, char* p, size_t n, Deadline deadline) {
  while (n > 0) {
    COHORT_RETURN_IF_ERROR(poll_until(fd, POLLIN, deadline));
    ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r == 0) return unavailable("store: peer closed the connection");
    if (r < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      if (errno == ECONNRESET) return unavailable("store: peer reset the connection");
      return errno_error("store: recv");
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Status::ok();
}

}  // namespace

Status write_frame(int fd, const std::string& body, Deadline deadline) {
  Writer header;
  header.u32(static_cast<uint32_t>(body.size()));
  COHORT_RETURN_IF_ERROR(write_all(fd, header.bytes().data(), 4, deadline));
  return write_all(fd, body.data(), body.size(), deadline);
}

Result<std::string> read_frame(int fd, Deadline deadline, uint32_t max_bytes) {
  char header[4];
  COHORT_RETURN_IF_ERROR(read_all(fd, header, 4, deadline));
  uint32_t n = Reader(std::string_view(header, 4)).u32();
  if (n > max_bytes) {
    return invalid_argument("store: frame of " + std::to_string(n) + " bytes exceeds the " +
                            std::to_string(max_bytes) +
                            "-byte limit (not a cohort store peer, or a value too large?)");
  }
  constexpr size_t kChunk = 64 << 10;
  std::string body;
  body.reserve(std::min<size_t>(n, kChunk));
  while (body.size() < n) {
    size_t have = body.size();
    size_t step = std::min<size_t>(n - have, kChunk);
    body.resize(have + step);
    COHORT_RETURN_IF_ERROR(read_all(fd, body.data() + have, step, deadline));
  }
  return body;
}

Result<int> connect_tcp(const std::string& host, int port, Deadline deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  std::string last_error = "no attempt";
  for (;;) {
    addrinfo* res = nullptr;
    int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (rc != 0) {
      last_error = std::string("cannot resolve host: ") + gai_strerror(rc);
    } else {
      for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
        int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
          int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          ::freeaddrinfo(res);
          return fd;
        }
        last_error = std::strerror(errno);
        ::close(fd);
      }
      ::freeaddrinfo(res);
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    // The server (rank 0, the agent) may not be listening yet.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return unavailable("store: cannot connect to " + host + ":" + std::to_string(port) + ": " +
                     last_error);
}

Result<int> listen_tcp(const std::string& host, int port, int* bound_port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(),
                         &hints, &res);
  if (rc != 0)
    return invalid_argument("store: cannot resolve listen address '" + host +
                            "': " + gai_strerror(rc));
  std::string last_error = "no address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
      sockaddr_storage addr{};
      socklen_t len = sizeof(addr);
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
      *bound_port = addr.ss_family == AF_INET6
                        ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                        : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
      ::freeaddrinfo(res);
      return fd;
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return io_error("store: cannot listen on " + host + ":" + std::to_string(port) + ": " +
                  last_error);
}

}  // namespace cohort::store::wire
