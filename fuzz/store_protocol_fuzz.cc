// libFuzzer: the rendezvous store's wire protocol as a TcpStoreServer reads
// it from a worker (collective/store/tcp_store_protocol.h): frames, opcodes,
// strings and integers, over a real loopback connection. The backend answers
// at once, so timeouts in the input cannot stall a run.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "collective/store/tcp_store.h"
#include "collective/store/tcp_store_protocol.h"

namespace {

using namespace cohort;

class AnswerAtOnce final : public store::StoreBackend {
 public:
  void set(const std::string&, std::string, Done done) override { done(Status::ok()); }
  void get(const std::string& key, store::Milliseconds, ValueDone done) override { done(key); }
  void add(const std::string&, int64_t delta, AddDone done) override { done(delta); }
  void wait(std::vector<std::string>, store::Milliseconds, Done done) override {
    done(timeout_error("fuzz"));
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::unique_ptr<store::TcpStoreServer> server = [] {
    store::TcpStoreServerOptions o;
    o.max_frame_bytes = 1 << 20;
    return std::move(*store::TcpStoreServer::start(std::make_shared<AnswerAtOnce>(), o));
  }();
  // The reader on its own, as clients use it on replies.
  store::wire::Reader r(std::string_view(reinterpret_cast<const char*>(data), size));
  while (r.ok() && !r.at_end()) {
    (void)r.u8();
    (void)r.str();
    (void)r.i64();
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  auto fd = store::wire::connect_tcp("127.0.0.1", server->port(), deadline);
  if (!fd) return 0;
  size_t sent = 0;
  while (sent < size) {
    ssize_t n = ::send(*fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += size_t(n);
  }
  ::shutdown(*fd, SHUT_WR);
  while (store::wire::read_frame(*fd, deadline)) {
  }
  ::close(*fd);
  return 0;
}
