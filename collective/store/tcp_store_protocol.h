// The TCP store wire protocol, shared by TcpStoreServer, TcpStoreClient and
// the agent's store proxy (which serves the same protocol to its workers).
//
// Every message is a frame: a little-endian u32 body length, then the body.
// Request bodies start with an opcode byte; strings are a u32 length and the
// bytes; integers are little-endian.
//   SET  = 1: key, value
//   GET  = 2: key, i64 timeout_ms          (server blocks until set or timeout)
//   ADD  = 3: key, i64 delta
//   WAIT = 4: u32 n, n keys, i64 timeout_ms
//   AUTH = 5: token                        (first, when the server has a token)
// A response body is a u8 StatusCode, then on success the GET value (string)
// or the ADD sum (i64), and on failure the error message (string).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace cohort::store::wire {

enum class Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kWait = 4, kAuth = 5 };

// Frames above this size are refused: a peer speaking another protocol (or
// garbage) gets an error instead of an allocation of gigabytes.
constexpr uint32_t kMaxFrameBytes = 256u << 20;

class Writer {
 public:
  void u8(uint8_t v) { buf_.push_back(static_cast<char>(v)); }
  void u32(uint32_t v);
  void i64(int64_t v);
  void str(std::string_view s);
  const std::string& bytes() const { return buf_; }

 private:
  std::string buf_;
};

// Reads fields in order; any read past the end sets !ok() and yields zeros.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  uint8_t u8();
  uint32_t u32();
  int64_t i64();
  std::string str();
  bool ok() const { return ok_; }
  bool at_end() const { return pos_ == data_.size(); }

 private:
  bool take(size_t n, const char** p);
  std::string_view data_;
  size_t pos_ = 0;
  bool ok_ = true;
};

using Deadline = std::chrono::steady_clock::time_point;

// Whole-frame socket I/O. Both fail with kTimeout at `deadline`, kUnavailable
// when the peer closed, kIo on other socket errors.
Status write_frame(int fd, const std::string& body, Deadline deadline);
// The announced size is checked against `max_bytes` before anything is
// allocated, and the body grows as bytes arrive: a peer announcing 256 MiB
// and sending nothing costs nothing (8 such connections had cost 2 GB).
Result<std::string> read_frame(int fd, Deadline deadline, uint32_t max_bytes = kMaxFrameBytes);

// A connected TCP socket (TCP_NODELAY), retried until `deadline` while the
// server is not yet listening.
Result<int> connect_tcp(const std::string& host, int port, Deadline deadline);
// A listening socket on host:port (port 0 picks a free one); `bound_port`
// receives the actual port.
Result<int> listen_tcp(const std::string& host, int port, int* bound_port);

}  // namespace cohort::store::wire
